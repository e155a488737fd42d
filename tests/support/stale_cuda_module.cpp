// A CUDA module of another build of wick, for test_cuda: the one symbol wick looks up, whose
// table starts with a size no build of this wick's table has.
#include <cstddef>

namespace {
const std::size_t kOtherTableSize = 1;
}  // namespace

extern "C" __attribute__((visibility("default"))) const void* wick_cuda_module() {
  return &kOtherTableSize;
}
