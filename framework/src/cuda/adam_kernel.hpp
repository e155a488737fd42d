// Private: the CUDA kernel behind cuda::adam_steps, declared without LibTorch so that nvcc
// compiles adam_kernel.cu without LibTorch's headers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wick::cuda {

// One tensor's update: adam_pass's arguments (decay: Adam's L2 term; shrink: AdamW's
// 1 - lr * weight_decay, else 1), and where copy is not null, the updated p rounded to bf16
// (to nearest even, as a cast: bits) written there too (optim/bf16_copies.hpp).
struct AdamTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  std::int64_t n;
  float beta1, beta2, step_size, bc2_sqrt, eps, decay, shrink;
  std::uint16_t* copy;
};

// Launches the updates of `count` tensors on `stream` (a cudaStream_t), in order, up to 40
// tensors in one kernel: a launch per tensor costs more than a small tensor's update (GPT-2
// has 148 tensors, about 100 of them biases and gains). A tensor listed again is updated
// again, after the first. Throws std::runtime_error with CUDA's message when a launch fails.
void launch_adam(const AdamTensor* tensors, std::size_t count, void* stream);

}  // namespace wick::cuda
