// Private, device code shared by wick's row kernels (layer_norm_kernel.cu,
// column_sum_kernel.cu): a float32 or bf16 value read and written as float, and the last step
// of their column sums, the sums over chunks of rows added in chunk order, so that a gradient
// is the same from run to run whichever order the blocks ran in.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace wick::cuda {
namespace {

__device__ __forceinline__ float load(const float* p, std::int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) {
  p[i] = v;
}
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) {
  p[i] = __float2bfloat16(v);
}

constexpr int kChunkSumWarps = 8;  // warps per block of chunks_sum_kernel

// Where chunks_sum_kernel writes its kArrays sums, each of `width` values.
template <int kArrays, class Out>
struct ChunkSumOut {
  Out* sums[kArrays];
};

// partial holds kArrays sums per chunk of rows, [chunk][array][width] (float); out.sums[a][j]
// = the sum over the chunks of partial[chunk][a][j]. A block per 32 columns (a lane each), its
// warp k adding chunks k, k + kChunkSumWarps, ... (unrolled, so that a thread's loads are in
// flight together: one at a time, run 5 timed the layer norm's at 10 us a call for 3 MB), then
// warp 0 the warps' sums in warp order. Launched with kChunkSumWarps * 32 threads a block and
// (width + 31) / 32 blocks.
template <int kArrays, class Out>
__global__ void __launch_bounds__(kChunkSumWarps * 32)
    chunks_sum_kernel(const float* __restrict__ partial, std::int64_t chunks, std::int64_t width,
                      ChunkSumOut<kArrays, Out> out) {
  __shared__ float sums[kArrays][kChunkSumWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * 32 + lane;
  float a[kArrays];
#pragma unroll
  for (int k = 0; k < kArrays; ++k) a[k] = 0;
  if (j < width)
#pragma unroll 8
    for (std::int64_t c = warp; c < chunks; c += kChunkSumWarps)
#pragma unroll
      for (int k = 0; k < kArrays; ++k) a[k] += partial[(c * kArrays + k) * width + j];
#pragma unroll
  for (int k = 0; k < kArrays; ++k) sums[k][warp][lane] = a[k];
  __syncthreads();
  if (warp != 0 || j >= width) return;
#pragma unroll
  for (int k = 0; k < kArrays; ++k) {
    float s = 0;
    for (int w = 0; w < kChunkSumWarps; ++w) s += sums[k][w][lane];
    store(out.sums[k], j, s);
  }
}

}  // namespace
}  // namespace wick::cuda
