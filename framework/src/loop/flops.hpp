// Private: counts the floating-point operations of the matrix products and convolutions run
// on this thread while a FlopCounter lives, from the shapes LibTorch's dispatcher sees
// (RecordFunction callbacks). A multiply-add counts 2, a bias add 1; ops called inside a
// counted op (a convolution's own matrix products) are not counted again. The matrix
// products' shapes are kept, so that the peak utilisation is measured against can be probed
// on the run's own products (probe_peak_gflops). Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for the white-box tests (tests/), which link libwick; not an installed header.
WICK_PUBLIC_BEGIN

namespace wick {

// One matrix product: b products of (m x k) @ (k x n), in `dtype` (a c10::ScalarType).
struct MatmulShape {
  std::int64_t b = 1, m = 0, k = 0, n = 0;
  int dtype = 0;
  bool backward = true;  // a backward will run for it (grad mode on, an input needs a gradient)
  double flops() const { return 2.0 * static_cast<double>(b * m) * static_cast<double>(k * n); }
};

class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;
  double flops() const { return flops_; }
  // With the backward each op will have: as usual twice its forward, for an op run with grad
  // mode on on an input that needs a gradient; none for the rest (a frozen network under
  // no_grad, as style transfer runs one), whose forward counts once.
  double train_flops() const { return train_flops_; }
  const std::vector<MatmulShape>& matmuls() const { return matmuls_; }
  // The dtype of the convolutions seen (a c10::ScalarType; -1: none).
  int conv_dtype() const { return conv_dtype_; }

 private:
  friend struct FlopCallbacks;
  double flops_ = 0, train_flops_ = 0;
  std::vector<MatmulShape> matmuls_;
  int conv_dtype_ = -1;
  std::uint64_t handle_ = 0;
  FlopCounter* outer_ = nullptr;  // a counter this one shadows on the thread
};

// While one lives, the products this thread's counter sees count with a backward: those of
// wick's own autograd functions, whose forward runs with grad mode off though their backward
// will run (`trains`: an input needs a gradient).
class CountWithBackward {
 public:
  explicit CountWithBackward(bool trains);
  ~CountWithBackward();
  CountWithBackward(const CountWithBackward&) = delete;
  CountWithBackward& operator=(const CountWithBackward&) = delete;

 private:
  bool on_;
};

// A product run past LibTorch's dispatcher (cuBLASLt's, gelu_gemm), which no callback sees:
// counted by this thread's counter when one lives (`bias`: a bias added to its m x n result).
void count_matmul(MatmulShape s, bool bias);

// Where a peak is probed: the CPU, or a CUDA device (index -1: the current one).
struct ProbeDevice {
  bool cuda = false;
  int index = -1;
};

// The best rate (GFLOP/s) LibTorch reaches on `device` on these products, all of them in turn
// as a step runs them, repeated for about `seconds` after a warm-up (long enough for the cores
// to reach their steady clock; on a GPU each round is waited for); with `with_backward`, each
// product's two backward products too (the gradients of its inputs). A shape repeated (each
// layer's) is allocated once and run as often. Fixed values: the global generator does not
// move. Throws what LibTorch throws (a GPU out of memory).
double probe_peak_gflops(const std::vector<MatmulShape>& shapes, bool with_backward, double seconds,
                         ProbeDevice device = {});

}  // namespace wick

WICK_PUBLIC_END
