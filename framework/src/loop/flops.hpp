// Private: counts the floating-point operations of the matrix products and convolutions run
// on this thread while a FlopCounter lives, from the shapes LibTorch's dispatcher sees
// (RecordFunction callbacks). A multiply-add counts 2, a bias add 1; ops called inside a
// counted op (a convolution's own matrix products) are not counted again. Torch-free header.
#pragma once

#include <cstdint>

namespace wick {

class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;
  double flops() const { return flops_; }

 private:
  double flops_ = 0;
  std::uint64_t handle_ = 0;
  FlopCounter* outer_ = nullptr;  // a counter this one shadows on the thread
};

}  // namespace wick
