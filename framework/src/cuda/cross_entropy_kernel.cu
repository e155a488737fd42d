// Cross-entropy over rows of logits, one block per row. Forward: one pass over the row keeps a
// running maximum and the sum of exp(x - maximum) (rescaled when the maximum grows, once per
// 16 bytes of logits: a rescale per value, a branch each, held GPT-2's forward to 1.9 TB/s on an
// H200, where its backward, reading and writing, reached 4.1), so the log-sum-exp needs no
// second pass and no log-probabilities are written. Backward: one pass
// that reads the logits and writes softmax - onehot, scaled. Rows of 16-byte-aligned logits are
// read (and the gradient written) 16 bytes at a time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "cuda/cross_entropy_kernel.hpp"
#include "cuda/launch_check.hpp"

namespace wick::cuda {

namespace {

constexpr int kMaxThreads = 512;

__device__ __forceinline__ float as_float(float x) {
  return x;
}
__device__ __forceinline__ float as_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float as_float(__half x) {
  return __half2float(x);
}
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half(x);
}

// 16 bytes of logits: one load.
template <class T>
struct alignas(16) Pack {
  static constexpr int n = 16 / sizeof(T);
  T v[n];
};

// A running maximum and the sum of exp(x - maximum) over the values seen. A NaN makes the sum
// NaN (the loss shows it); -inf adds nothing.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum add(MaxSum a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.f;  // a.m = -inf: a.s is 0
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += expf(x - a.m);
  }
  return a;
}

// A pack of values added at once: their maximum first, so that the sum is rescaled once a pack
// and each value costs an exp and an add. Where that maximum is infinite (only -inf seen so
// far, or a +inf), value by value as add() does, whose results those are.
template <int n>
__device__ __forceinline__ MaxSum add_pack(MaxSum a, const float (&x)[n]) {
  float m = a.m;
#pragma unroll
  for (int j = 0; j < n; ++j) m = fmaxf(m, x[j]);
  if (fabsf(m) == INFINITY) {
#pragma unroll
    for (int j = 0; j < n; ++j) a = add(a, x[j]);
    return a;
  }
  float s = a.s * expf(a.m - m);  // a.m = -inf: 0
#pragma unroll
  for (int j = 0; j < n; ++j) s += expf(x[j] - m);
  return {m, s};
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, a.s + b.s};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = merge(
        v, {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)});
  return v;
}

// The whole block's MaxSum, in thread 0 (blockDim.x is a multiple of 32).
__device__ MaxSum block_merge(MaxSum v) {
  __shared__ MaxSum part[kMaxThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_merge(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp != 0) return v;
  v = lane < static_cast<int>(blockDim.x / 32) ? part[lane] : MaxSum{-INFINITY, 0.f};
  return warp_merge(v);
}

template <class T, bool kVec>
__global__ void forward_kernel(const T* __restrict__ logits,
                               const std::int64_t* __restrict__ target, std::int64_t vocab,
                               std::int64_t ignore_index, float* __restrict__ loss,
                               float* __restrict__ lse) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  MaxSum acc{-INFINITY, 0.f};
  if (kVec) {
    const auto* packs = reinterpret_cast<const Pack<T>*>(x);
    for (std::int64_t i = threadIdx.x; i < vocab / Pack<T>::n; i += blockDim.x) {
      const Pack<T> p = packs[i];
      float v[Pack<T>::n];
#pragma unroll
      for (int j = 0; j < Pack<T>::n; ++j) v[j] = as_float(p.v[j]);
      acc = add_pack(acc, v);
    }
  } else {
    for (std::int64_t i = threadIdx.x; i < vocab; i += blockDim.x) acc = add(acc, as_float(x[i]));
  }
  acc = block_merge(acc);
  if (threadIdx.x != 0) return;
  const float l = acc.m + logf(acc.s);
  lse[row] = l;
  const std::int64_t t = target[row];
  loss[row] = t == ignore_index ? 0.f : (t < 0 || t >= vocab) ? NAN : l - as_float(x[t]);
}

template <class T, bool kVec>
__global__ void backward_kernel(const T* __restrict__ logits, T* __restrict__ grad,
                                const std::int64_t* __restrict__ target,
                                const float* __restrict__ lse, const float* __restrict__ scale,
                                std::int64_t vocab, std::int64_t ignore_index) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  T* g = grad + row * vocab;
  const std::int64_t t = target[row];
  const bool ignored = t == ignore_index;
  const float l = lse[row], k = *scale;
  auto value = [&](float xi, std::int64_t i) {
    return ignored ? 0.f : (expf(xi - l) - (i == t ? 1.f : 0.f)) * k;
  };
  if (kVec) {
    const auto* in = reinterpret_cast<const Pack<T>*>(x);
    auto* out = reinterpret_cast<Pack<T>*>(g);
    for (std::int64_t i = threadIdx.x; i < vocab / Pack<T>::n; i += blockDim.x) {
      const Pack<T> p = in[i];
      Pack<T> q;
#pragma unroll
      for (int j = 0; j < Pack<T>::n; ++j)
        q.v[j] = from_float<T>(value(as_float(p.v[j]), i * Pack<T>::n + j));
      out[i] = q;
    }
  } else {
    for (std::int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
      g[i] = from_float<T>(value(as_float(x[i]), i));
  }
}

// Threads per row: the row's loads, rounded up to whole warps, at most kMaxThreads.
int threads_for(std::int64_t loads) {
  const std::int64_t warps = (loads + 31) / 32;
  return static_cast<int>(warps * 32 < kMaxThreads ? (warps > 0 ? warps * 32 : 32) : kMaxThreads);
}

template <class T>
bool packable(const void* p, std::int64_t vocab) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && vocab % Pack<T>::n == 0;
}

constexpr const char* kForward = "the CUDA cross-entropy forward kernel";
constexpr const char* kBackward = "the CUDA cross-entropy backward kernel";

template <class T>
void forward_as(const void* logits, const std::int64_t* target, std::int64_t rows,
                std::int64_t vocab, std::int64_t ignore_index, float* loss, float* lse,
                cudaStream_t s) {
  const auto* x = static_cast<const T*>(logits);
  const auto blocks = static_cast<unsigned>(rows);
  if (packable<T>(logits, vocab))
    forward_kernel<T, true><<<blocks, threads_for(vocab / Pack<T>::n), 0, s>>>(
        x, target, vocab, ignore_index, loss, lse);
  else
    forward_kernel<T, false>
        <<<blocks, threads_for(vocab), 0, s>>>(x, target, vocab, ignore_index, loss, lse);
}

template <class T>
void backward_as(const void* logits, void* grad, const std::int64_t* target, const float* lse,
                 const float* scale, std::int64_t rows, std::int64_t vocab,
                 std::int64_t ignore_index, cudaStream_t s) {
  const auto* x = static_cast<const T*>(logits);
  auto* g = static_cast<T*>(grad);
  const auto blocks = static_cast<unsigned>(rows);
  if (packable<T>(logits, vocab) && packable<T>(grad, vocab))
    backward_kernel<T, true><<<blocks, threads_for(vocab / Pack<T>::n), 0, s>>>(
        x, g, target, lse, scale, vocab, ignore_index);
  else
    backward_kernel<T, false>
        <<<blocks, threads_for(vocab), 0, s>>>(x, g, target, lse, scale, vocab, ignore_index);
}

void check_shape(std::int64_t rows, std::int64_t vocab) {
  if (rows > 0x7fffffff || vocab <= 0)
    throw std::invalid_argument(
        "wick: cross_entropy's CUDA kernel takes 1 to 2^31 - 1 rows of "
        "at least one logit");
}

}  // namespace

void launch_cross_entropy_forward(const void* logits, LogitType type, const std::int64_t* target,
                                  std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index,
                                  float* loss, float* lse, void* stream) {
  if (rows == 0) return;
  check_shape(rows, vocab);
  auto s = static_cast<cudaStream_t>(stream);
  check_before_launch(kForward);
  switch (type) {
    case LogitType::f32:
      forward_as<float>(logits, target, rows, vocab, ignore_index, loss, lse, s);
      break;
    case LogitType::bf16:
      forward_as<__nv_bfloat16>(logits, target, rows, vocab, ignore_index, loss, lse, s);
      break;
    case LogitType::f16:
      forward_as<__half>(logits, target, rows, vocab, ignore_index, loss, lse, s);
      break;
  }
  check_launch(kForward);
}

void launch_cross_entropy_backward(const void* logits, void* grad, LogitType type,
                                   const std::int64_t* target, const float* lse, const float* scale,
                                   std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index,
                                   void* stream) {
  if (rows == 0) return;
  check_shape(rows, vocab);
  auto s = static_cast<cudaStream_t>(stream);
  check_before_launch(kBackward);
  switch (type) {
    case LogitType::f32:
      backward_as<float>(logits, grad, target, lse, scale, rows, vocab, ignore_index, s);
      break;
    case LogitType::bf16:
      backward_as<__nv_bfloat16>(logits, grad, target, lse, scale, rows, vocab, ignore_index, s);
      break;
    case LogitType::f16:
      backward_as<__half>(logits, grad, target, lse, scale, rows, vocab, ignore_index, s);
      break;
  }
  check_launch(kBackward);
}

}  // namespace wick::cuda
