// Adam on the GPU, one element per thread (grid-stride): each element's parameter, gradient
// and moments are read once and written once, as fused_adam.cpp does on the CPU, with the same
// formulas in the same order.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/adam_kernel.hpp"

namespace wick::cuda {

namespace {

template <bool kDecay>
__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, std::int64_t n,
                            float beta1, float beta2, float step_size, float bc2_sqrt, float eps,
                            float decay, float shrink) {
  const std::int64_t stride = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float gi = g[i];
    if (kDecay) gi += decay * p[i];
    const float mi = m[i] * beta1 + (1 - beta1) * gi;
    const float vi = v[i] * beta2 + (1 - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    // shrink: AdamW's 1 - lr * weight_decay, else 1 (exact: x * 1 == x).
    p[i] = p[i] * shrink - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

}  // namespace

void launch_adam(float* p, const float* g, float* m, float* v, std::int64_t n, float beta1,
                 float beta2, float step_size, float bc2_sqrt, float eps, float decay, float shrink,
                 void* stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  // Enough blocks to fill any current GPU; the grid-stride loop covers the rest.
  const std::int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 8192 ? wanted : 8192);
  auto s = static_cast<cudaStream_t>(stream);
  if (decay != 0)
    adam_kernel<true><<<blocks, kThreads, 0, s>>>(p, g, m, v, n, beta1, beta2, step_size, bc2_sqrt,
                                                  eps, decay, shrink);
  else
    adam_kernel<false><<<blocks, kThreads, 0, s>>>(p, g, m, v, n, beta1, beta2, step_size, bc2_sqrt,
                                                   eps, decay, shrink);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw std::runtime_error(std::string("wick: the CUDA Adam kernel failed to launch: ") +
                             cudaGetErrorString(e));
}

}  // namespace wick::cuda
