// Private: the CUDA kernel behind cuda::adam_step, declared without LibTorch so that nvcc
// compiles adam_kernel.cu without LibTorch's headers.
#pragma once

#include <cstdint>

namespace wick::cuda {

// Launches the update of n elements on `stream` (a cudaStream_t): adam_pass's (decay: Adam's
// L2 term; shrink: AdamW's 1 - lr * weight_decay, else 1). Throws std::runtime_error with
// CUDA's message when the launch fails.
void launch_adam(float* p, const float* g, float* m, float* v, std::int64_t n, float beta1,
                 float beta2, float step_size, float bc2_sqrt, float eps, float decay, float shrink,
                 void* stream);

}  // namespace wick::cuda
