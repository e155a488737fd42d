// Adam on the GPU, many tensors per launch: each block updates one chunk of one tensor, each
// element's parameter, gradient and moments read once and written once, as fused_adam.cpp
// does on the CPU, with the same formulas in the same order.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/adam_kernel.hpp"
#include "cuda/launch_check.hpp"

namespace wick::cuda {

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kChunk = 8192;  // elements per block: 8 float4 per thread
// Tensors per launch: their arguments travel in the kernel's parameters (4 KB at most).
constexpr std::size_t kBatch = 40;
constexpr const char* kAdam = "the CUDA Adam kernel";

struct Batch {
  AdamTensor t[kBatch];
  std::int64_t first_block[kBatch + 1];  // tensor i's chunks are blocks [first[i], first[i+1])
  int count;
};
static_assert(sizeof(Batch) <= 4000, "a kernel's parameters are at most 4 KB");

__device__ __forceinline__ void update(const AdamTensor& t, float& p, float g, float& m, float& v) {
  if (t.decay != 0) g += t.decay * p;
  m = m * t.beta1 + (1 - t.beta1) * g;
  v = v * t.beta2 + (1 - t.beta2) * g * g;
  // shrink: AdamW's 1 - lr * weight_decay, else 1 (exact: x * 1 == x).
  p = p * t.shrink - t.step_size * m / (sqrtf(v) / t.bc2_sqrt + t.eps);
}

__device__ __forceinline__ std::uint16_t bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__global__ void adam_kernel(const Batch b) {
  const std::int64_t block = blockIdx.x;
  int i = 0;
  while (i + 1 < b.count && b.first_block[i + 1] <= block) ++i;
  const AdamTensor t = b.t[i];  // into registers, read from the parameters once
  const std::int64_t begin = (block - b.first_block[i]) * kChunk;
  const std::int64_t end = begin + kChunk < t.n ? begin + kChunk : t.n;
  // 16 bytes at a time where all four arrays allow it (a chunk starts a multiple of 4 floats
  // into its tensor) and the copy's 8, then the chunk's tail element by element.
  std::int64_t j = begin;
  const auto aligned = [](const void* q, unsigned bytes) {
    return reinterpret_cast<std::uintptr_t>(q) % bytes == 0;
  };
  if (aligned(t.p, 16) && aligned(t.g, 16) && aligned(t.m, 16) && aligned(t.v, 16) &&
      aligned(t.copy, 8)) {
    const std::int64_t vec_end = begin + (end - begin) / 4 * 4;
    for (std::int64_t k = begin + 4 * threadIdx.x; k < vec_end; k += 4 * kThreads) {
      float4 p = *reinterpret_cast<const float4*>(t.p + k);
      const float4 g = *reinterpret_cast<const float4*>(t.g + k);
      float4 m = *reinterpret_cast<const float4*>(t.m + k);
      float4 v = *reinterpret_cast<const float4*>(t.v + k);
      update(t, p.x, g.x, m.x, v.x);
      update(t, p.y, g.y, m.y, v.y);
      update(t, p.z, g.z, m.z, v.z);
      update(t, p.w, g.w, m.w, v.w);
      *reinterpret_cast<float4*>(t.p + k) = p;
      *reinterpret_cast<float4*>(t.m + k) = m;
      *reinterpret_cast<float4*>(t.v + k) = v;
      if (t.copy)
        *reinterpret_cast<ushort4*>(t.copy + k) =
            ushort4{bf16_bits(p.x), bf16_bits(p.y), bf16_bits(p.z), bf16_bits(p.w)};
    }
    j = vec_end;
  }
  for (std::int64_t k = j + threadIdx.x; k < end; k += kThreads) {
    float p = t.p[k], m = t.m[k], v = t.v[k];
    update(t, p, t.g[k], m, v);
    t.p[k] = p;
    t.m[k] = m;
    t.v[k] = v;
    if (t.copy) t.copy[k] = bf16_bits(p);
  }
}

}  // namespace

void launch_adam(const AdamTensor* tensors, std::size_t count, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  Batch b{};
  const auto launch = [&] {
    if (b.count > 0 && b.first_block[b.count] > 0) {
      check_before_launch(kAdam);
      adam_kernel<<<static_cast<unsigned>(b.first_block[b.count]), kThreads, 0, s>>>(b);
      check_launch(kAdam);
    }
    b.count = 0;
  };
  const auto in_batch = [&](const float* p) {
    for (int i = 0; i < b.count; ++i)
      if (b.t[i].p == p) return true;
    return false;
  };
  for (std::size_t k = 0; k < count; ++k) {
    if (tensors[k].n <= 0) continue;
    const std::int64_t blocks = (tensors[k].n + kChunk - 1) / kChunk;
    // A launch's grid is at most 2^31 - 1 blocks: far above any one tensor's (2^44 floats). A
    // tensor listed twice (tied weights) is updated twice, in order: in the next launch.
    if (b.count == static_cast<int>(kBatch) || b.first_block[b.count] + blocks > 0x7fffffff ||
        in_batch(tensors[k].p))
      launch();
    b.t[b.count] = tensors[k];
    b.first_block[b.count + 1] = b.first_block[b.count] + blocks;
    ++b.count;
  }
  launch();
}

}  // namespace wick::cuda
