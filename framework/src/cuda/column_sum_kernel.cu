// Sums over the rows of a [rows, width] gradient, per column: a bias's gradient. LibTorch's
// at::sum over dim 0 of GPT-2's bf16 gradients ran at about a quarter of the memory's speed
// (run 5 on an H200: 1.21 ms a step for 36 sums; bench/results-gpu.md). Here a block takes
// 32 x kVec columns and a chunk of rows: each lane reads kVec neighbouring values of a row at
// once (16-byte loads where the rows allow), its warp every kWarps-th row of the chunk, a
// group of kUnroll rows loaded before any is used. The warps' sums are added in warp order,
// the chunks' sums then in chunk order (chunk_sums.cuh): the same result from run to run.
// GELU's gradient takes the same pass, writing each value before summing it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/chunk_sums.cuh"
#include "cuda/column_sum_kernel.hpp"
#include "cuda/launch_check.hpp"

namespace wick::cuda {

namespace {

constexpr int kWarps = 8;                    // warps per block, each on its own rows
constexpr int kUnroll = 4;                   // rows a lane loads before it adds them
constexpr int kVec = 8;                      // columns per lane where 16-byte loads fit
constexpr std::int64_t kMinChunkRows = 128;  // so that a lane has 16 rows of a chunk to read
constexpr std::int64_t kMaxChunks = 256;

// n values of p from i: with n = kVec, in 16-byte loads (the caller checked the alignment).
template <int n, class T>
__device__ __forceinline__ void load_values(const T* __restrict__ p, std::int64_t i,
                                            float (&v)[n]) {
  if constexpr (n == 1) {
    v[0] = load(p, i);
  } else {
    constexpr int kPerLoad = 16 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int l = 0; l < n / kPerLoad; ++l) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p + i + l * kPerLoad);
      T values[kPerLoad];
      memcpy(static_cast<void*>(values), &raw, sizeof raw);
#pragma unroll
      for (int k = 0; k < kPerLoad; ++k) v[l * kPerLoad + k] = load(values, k);
    }
  }
}

// What the partial sums read: g itself.
template <int n, class T>
struct Values {
  const T* __restrict__ g;
  struct Loaded {
    float v[n];
  };
  __device__ __forceinline__ void load(std::int64_t i, Loaded& in) const {
    load_values<n>(g, i, in.v);
  }
  __device__ __forceinline__ void use(std::int64_t, const Loaded& in, float (&sum)[n]) const {
#pragma unroll
    for (int k = 0; k < n; ++k) sum[k] += in.v[k];
  }
};

// GELU's (tanh) gradient d = dh gelu'(pre), written to d and summed as written (bf16).
template <int n>
struct GeluGradient {
  const __nv_bfloat16* __restrict__ dh;
  const __nv_bfloat16* __restrict__ pre;
  __nv_bfloat16* __restrict__ d;
  struct Loaded {
    float dh[n], pre[n];
  };
  __device__ __forceinline__ void load(std::int64_t i, Loaded& in) const {
    load_values<n>(dh, i, in.dh);
    load_values<n>(pre, i, in.pre);
  }
  __device__ __forceinline__ void use(std::int64_t i, const Loaded& in, float (&sum)[n]) const {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    // The values in pairs, 16-byte aligned: each 8 of them one store.
    alignas(16) __nv_bfloat162 out[(n + 1) / 2];
#pragma unroll
    for (int k = 0; k < n; ++k) {
      const float x = in.pre[k], x_sq = x * x;
      const float t = tanhf(kBeta * (x + kKappa * x_sq * x));
      const float grad =
          0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * x_sq);
      const __nv_bfloat16 v = __float2bfloat16(in.dh[k] * grad);
      if (k % 2 == 0)
        out[k / 2].x = v;
      else
        out[k / 2].y = v;
      sum[k] += __bfloat162float(v);
    }
    if constexpr (n == 1) {
      d[i] = out[0].x;
    } else {
      // __stwb: the plain store said in 16 bytes, which nvcc otherwise splits into four here.
#pragma unroll
      for (int l = 0; l < n / 8; ++l)
        __stwb(reinterpret_cast<uint4*>(d + i + 8 * l),
               *reinterpret_cast<const uint4*>(out + 4 * l));
    }
  }
};

// Grid: x, tiles of 32 n columns; y, chunks of chunk_rows rows. The tile's sums over the
// chunk, into out[chunk][column] (the partial sums, or the result itself for one chunk). With
// n > 1, width is a multiple of n: a lane's columns are all inside or all past the end.
template <int n, class Op, class Out>
__global__ void __launch_bounds__(kWarps * 32)
    chunk_kernel(Op op, std::int64_t rows, std::int64_t width, std::int64_t chunk_rows,
                 Out* __restrict__ out) {
  __shared__ float sums[kWarps][32 * n];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t tile = static_cast<std::int64_t>(blockIdx.x) * 32 * n;
  const std::int64_t j = tile + lane * n;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  float sum[n];
#pragma unroll
  for (int k = 0; k < n; ++k) sum[k] = 0;
  if (j < width)
    for (std::int64_t r = begin + warp; r < end; r += kWarps * kUnroll) {
      // Every load of the group before any store (GELU's): the loads do not wait for them.
      typename Op::Loaded in[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (r + u * kWarps < end) op.load((r + u * kWarps) * width + j, in[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (r + u * kWarps < end) op.use((r + u * kWarps) * width + j, in[u], sum);
    }
#pragma unroll
  for (int k = 0; k < n; ++k) sums[warp][lane * n + k] = sum[k];
  __syncthreads();
  for (int c = threadIdx.x; c < 32 * n; c += kWarps * 32) {
    if (tile + c >= width) break;
    float s = 0;
    for (int w = 0; w < kWarps; ++w) s += sums[w][c];
    store(out, static_cast<std::int64_t>(blockIdx.y) * width + tile + c, s);
  }
}

std::int64_t chunk_rows(std::int64_t rows) {
  const std::int64_t r = (rows + kMaxChunks - 1) / kMaxChunks;
  return r > kMinChunkRows ? r : kMinChunkRows;
}

std::int64_t chunks(std::int64_t rows) {
  const std::int64_t per = chunk_rows(rows);
  return rows > per ? (rows + per - 1) / per : 1;  // no rows: one chunk, of zeros
}

bool aligned(const void* p) {
  return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

template <class Body>
void with_out_type(RowType t, void* out, const Body& body) {
  if (t == RowType::bf16)
    body(static_cast<__nv_bfloat16*>(out));
  else
    body(static_cast<float*>(out));
}

constexpr const char* kSums = "the CUDA column sums kernel";
constexpr const char* kChunksSum = "the CUDA column sums' chunk sum kernel";

// The chunks' kernel for op (of n columns a lane), then the sum over the chunks.
template <int n, class Op>
void launch_sums(const Op& op, std::int64_t rows, std::int64_t width, void* out, RowType out_type,
                 float* partial, cudaStream_t stream) {
  const std::int64_t per = chunk_rows(rows), count = chunks(rows);
  const dim3 grid(static_cast<unsigned>((width + 32 * n - 1) / (32 * n)),
                  static_cast<unsigned>(count));
  check_before_launch(kSums);
  if (count == 1) {
    with_out_type(out_type, out, [&](auto* o) {
      using Out = std::remove_pointer_t<decltype(o)>;
      chunk_kernel<n, Op, Out><<<grid, kWarps * 32, 0, stream>>>(op, rows, width, per, o);
    });
    check_launch(kSums);
    return;
  }
  chunk_kernel<n, Op, float><<<grid, kWarps * 32, 0, stream>>>(op, rows, width, per, partial);
  check_launch(kSums);
  with_out_type(out_type, out, [&](auto* o) {
    using Out = std::remove_pointer_t<decltype(o)>;
    chunks_sum_kernel<1, Out>
        <<<static_cast<unsigned>((width + 31) / 32), kChunkSumWarps * 32, 0, stream>>>(
            partial, count, width, ChunkSumOut<1, Out>{{o}});
  });
  check_launch(kChunksSum);
}

}  // namespace

std::int64_t column_sum_partials(std::int64_t rows, std::int64_t width) {
  const std::int64_t count = chunks(rows);
  return count > 1 ? count * width : 0;
}

void launch_column_sums(const void* g, RowType g_type, std::int64_t rows, std::int64_t width,
                        void* out, RowType out_type, float* partial, void* stream) {
  if (width <= 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  const bool vectors = width % kVec == 0 && aligned(g);
  const auto run = [&](auto value) {
    using T = decltype(value);
    const T* values = static_cast<const T*>(g);
    if (vectors)
      launch_sums<kVec>(Values<kVec, T>{values}, rows, width, out, out_type, partial, st);
    else
      launch_sums<1>(Values<1, T>{values}, rows, width, out, out_type, partial, st);
  };
  if (g_type == RowType::bf16)
    run(__nv_bfloat16{});
  else
    run(float{});
}

void launch_gelu_backward_sums(const void* dh, const void* pre, std::int64_t rows,
                               std::int64_t width, void* d, void* out, RowType out_type,
                               float* partial, void* stream) {
  if (width <= 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  const auto* h = static_cast<const __nv_bfloat16*>(dh);
  const auto* p = static_cast<const __nv_bfloat16*>(pre);
  auto* dd = static_cast<__nv_bfloat16*>(d);
  if (width % kVec == 0 && aligned(dh) && aligned(pre) && aligned(d))
    launch_sums<kVec>(GeluGradient<kVec>{h, p, dd}, rows, width, out, out_type, partial, st);
  else
    launch_sums<1>(GeluGradient<1>{h, p, dd}, rows, width, out, out_type, partial, st);
}

}  // namespace wick::cuda
