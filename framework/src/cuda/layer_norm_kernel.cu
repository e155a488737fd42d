// Layer normalisation, one warp per row: the row's sums are warp reductions. A row of up to
// 1024 values, a multiple of 32 (GPT-2's 768), is held in registers: read from memory once,
// its later passes from the registers, and the backward adds the weight and bias gradients'
// share of its rows as it goes. Other rows are read from global memory on each pass (the later
// passes find them in the caches) and the weight and bias gradients take a pass of their own.
// Those gradients are column sums over the rows: per chunk of rows, then over the chunks in
// order (chunk_sums.cuh), so that they do not depend on the order blocks run in. No pointer a
// kernel writes through overlaps another it reads (the callers allocate the outputs), so each is
// __restrict__: without that, the compiler keeps each load after the stores before it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/chunk_sums.cuh"
#include "cuda/launch_check.hpp"
#include "cuda/layer_norm_kernel.hpp"

namespace wick::cuda {

namespace {

constexpr int kWarps = 8;                 // rows per block of the row kernels
constexpr int kColumns = 256;             // columns per block of param_partials_kernel
constexpr std::int64_t kMaxChunks = 512;  // chunks of rows those are first summed over

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// s's value at i: the sum written in the first pass (each lane reads back only its own
// writes), or x itself.
template <class X>
__device__ __forceinline__ float row_value(const X* x, const float* s, bool summed,
                                           std::int64_t i) {
  return summed ? s[i] : load(x, i);
}

template <class X, class B, class Y>
__global__ void forward_kernel(const X* __restrict__ x, const B* __restrict__ branch,
                               float* __restrict__ s, Y* __restrict__ y,
                               const float* __restrict__ w, const float* __restrict__ bias,
                               float eps, std::int64_t rows, std::int64_t width,
                               float* __restrict__ mean, float* __restrict__ rstd) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp: its row is past the end
  const int lane = threadIdx.x % 32;
  const std::int64_t base = row * width;
  const bool summed = branch != nullptr;
  float sum = 0;
  for (std::int64_t j = lane; j < width; j += 32) {
    float v = load(x, base + j);
    if (summed) {
      v += load(branch, base + j);
      s[base + j] = v;
    }
    sum += v;
  }
  const float inv_n = 1.f / static_cast<float>(width);
  // The first pass's mean corrected by the deviations from it, as on the CPU
  // (cpu/layer_norm_kernel.cpp): a row of one value repeated has no variance.
  const float m0 = warp_sum(sum) / static_cast<float>(width);
  float sd = 0, sq = 0;
  for (std::int64_t j = lane; j < width; j += 32) {
    const float d = row_value(x, s, summed, base + j) - m0;
    sd += d;
    sq += d * d;
  }
  sd = warp_sum(sd);
  const float m = m0 + sd * inv_n;
  const float rs = 1.f / sqrtf(fmaxf(0.f, (warp_sum(sq) - sd * sd * inv_n) * inv_n) + eps);
  for (std::int64_t j = lane; j < width; j += 32)
    store(y, base + j, (row_value(x, s, summed, base + j) - m) * rs * w[j] + bias[j]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

template <class S, class G, class B>
__global__ void backward_kernel(const S* __restrict__ s, const G* __restrict__ dy,
                                const S* __restrict__ ds, const float* __restrict__ w,
                                const float* __restrict__ mean, const float* __restrict__ rstd,
                                std::int64_t rows, std::int64_t width, S* __restrict__ dx,
                                B* __restrict__ d_branch) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t base = row * width;
  const float m = mean[row], rs = rstd[row];
  float sum_g = 0, sum_gx = 0;
  for (std::int64_t j = lane; j < width; j += 32) {
    const float g = load(dy, base + j) * w[j];
    sum_g += g;
    sum_gx += g * ((load(s, base + j) - m) * rs);
  }
  const float inv_n = 1.f / static_cast<float>(width);
  const float a = warp_sum(sum_g) * inv_n, c = warp_sum(sum_gx) * inv_n;
  for (std::int64_t j = lane; j < width; j += 32) {
    const float xh = (load(s, base + j) - m) * rs;
    float v = rs * (load(dy, base + j) * w[j] - a - xh * c);
    if (ds) v += load(ds, base + j);
    store(dx, base + j, v);
    if (d_branch) store(d_branch, base + j, v);
  }
}

// One thread per column and chunk of rows: that chunk's sums of dy xhat and dy, into
// partial[chunk][0 or 1][column]. Neighbouring threads read neighbouring columns.
template <class S, class G>
__global__ void param_partials_kernel(const S* s, const G* dy, const float* mean, const float* rstd,
                                      std::int64_t rows, std::int64_t width,
                                      std::int64_t chunk_rows, float* partial) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  if (j >= width) return;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  float dw = 0, db = 0;
  for (std::int64_t i = begin; i < end; ++i) {
    const float g = load(dy, i * width + j);
    dw += g * ((load(s, i * width + j) - mean[i]) * rstd[i]);
    db += g;
  }
  partial[2 * blockIdx.y * width + j] = dw;
  partial[(2 * blockIdx.y + 1) * width + j] = db;
}

// The same forward with the row in registers: each lane's per = width / 32 values (at most
// kPer) read once. The same operations in the same order as forward_kernel: the same results.
// Every load of a row comes before its first store: a store between two loads would hold the
// second back until the first returned (the compiler cannot tell that they do not overlap), a
// round trip to memory per value (run 5, bench/results-gpu.md).
template <int kPer, class X, class B, class Y>
__global__ void __launch_bounds__(kWarps * 32)
    forward_regs_kernel(const X* __restrict__ x, const B* __restrict__ branch,
                        float* __restrict__ s, Y* __restrict__ y, const float* __restrict__ w,
                        const float* __restrict__ bias, float eps, std::int64_t rows,
                        std::int64_t width, float* __restrict__ mean, float* __restrict__ rstd) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int per = static_cast<int>(width / 32);
  const std::int64_t base = row * width;
  float v[kPer];
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (k >= per) break;
    const std::int64_t j = lane + 32 * k;
    float a = load(x, base + j);
    if (branch != nullptr) a += load(branch, base + j);
    v[k] = a;
    sum += a;
  }
  if (branch != nullptr) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (k >= per) break;
      s[base + lane + 32 * k] = v[k];
    }
  }
  const float inv_n = 1.f / static_cast<float>(width);
  const float m0 = warp_sum(sum) / static_cast<float>(width);  // corrected, as above
  float sd = 0, sq = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (k >= per) break;
    const float d = v[k] - m0;
    sd += d;
    sq += d * d;
  }
  sd = warp_sum(sd);
  const float m = m0 + sd * inv_n;
  const float rs = 1.f / sqrtf(fmaxf(0.f, (warp_sum(sq) - sd * sd * inv_n) * inv_n) + eps);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (k >= per) break;
    const std::int64_t j = lane + 32 * k;
    v[k] = (v[k] - m) * rs * w[j] + bias[j];
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (k >= per) break;
    store(y, base + lane + 32 * k, v[k]);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// The backward with the row in registers, a block per chunk of rows (its warps take every
// kWarps-th row): dx and d_branch as backward_kernel computes them, and each lane's sums of
// dy xhat and dy for its columns over its rows, added over the block's warps in warp order into
// partial[chunk][0 or 1][column], as param_partials_kernel writes them. A row's loads (ds's
// too) all come before its stores, as in forward_regs_kernel: on an H200 the first version,
// which read ds between its stores, took 185 us a call at GPT-2's size, 4x its bytes' time.
template <int kPer, class S, class G, class B>
__global__ void __launch_bounds__(kWarps * 32)
    backward_regs_kernel(const S* __restrict__ s, const G* __restrict__ dy,
                         const S* __restrict__ ds, const float* __restrict__ w,
                         const float* __restrict__ mean, const float* __restrict__ rstd,
                         std::int64_t rows, std::int64_t width, std::int64_t chunk_rows,
                         S* __restrict__ dx, B* __restrict__ d_branch,
                         float* __restrict__ partial) {
  __shared__ float sums[2][kPer * 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per = static_cast<int>(width / 32);
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * chunk_rows;
  const std::int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
  const float inv_n = 1.f / static_cast<float>(width);
  float dw[kPer], db[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) dw[k] = db[k] = 0;
  for (std::int64_t row = begin + warp; row < end; row += kWarps) {
    const std::int64_t base = row * width;
    const float m = mean[row], rs = rstd[row];
    // gw: dy w; d: ds's value (0 without ds, added only with it).
    float xh[kPer], gw[kPer], d[kPer];
    float sum_g = 0, sum_gx = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (k >= per) break;
      const std::int64_t j = lane + 32 * k;
      const float g = load(dy, base + j);
      xh[k] = (load(s, base + j) - m) * rs;
      d[k] = ds ? load(ds, base + j) : 0.f;
      gw[k] = g * w[j];
      sum_g += gw[k];
      sum_gx += gw[k] * xh[k];
      dw[k] += g * xh[k];
      db[k] += g;
    }
    const float a = warp_sum(sum_g) * inv_n, c = warp_sum(sum_gx) * inv_n;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (k >= per) break;
      const std::int64_t j = lane + 32 * k;
      float v = rs * (gw[k] - a - xh[k] * c);
      if (ds) v += d[k];
      store(dx, base + j, v);
      if (d_branch) store(d_branch, base + j, v);
    }
  }
  for (int in_turn = 0; in_turn < kWarps; ++in_turn) {
    if (warp == in_turn) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (k >= per) break;
        const int j = lane + 32 * k;
        sums[0][j] = in_turn == 0 ? dw[k] : sums[0][j] + dw[k];
        sums[1][j] = in_turn == 0 ? db[k] : sums[1][j] + db[k];
      }
    }
    __syncthreads();
  }
  for (std::int64_t j = threadIdx.x; j < width; j += kWarps * 32) {
    partial[2 * blockIdx.x * width + j] = sums[0][j];
    partial[(2 * blockIdx.x + 1) * width + j] = sums[1][j];
  }
}

// body(std::integral_constant<int, kPer>{}) with kPer the registers per lane a row of `width`
// needs; false (body not called) where the row does not fit the registers' kernels.
template <class Body>
bool with_row_registers(std::int64_t width, const Body& body) {
  if (width % 32 != 0 || width < 32 || width > 1024) return false;
  const std::int64_t per = width / 32;
  if (per <= 8)
    body(std::integral_constant<int, 8>{});
  else if (per <= 16)
    body(std::integral_constant<int, 16>{});
  else if (per <= 24)
    body(std::integral_constant<int, 24>{});
  else
    body(std::integral_constant<int, 32>{});
  return true;
}

// Rows per chunk of the weight and bias sums.
std::int64_t chunk_rows(std::int64_t rows) {
  const std::int64_t r = (rows + kMaxChunks - 1) / kMaxChunks;
  return r > 0 ? r : 1;
}

// body(T{}) with T the CUDA type of t.
template <class Body>
void with_type(RowType t, const Body& body) {
  if (t == RowType::bf16)
    body(__nv_bfloat16{});
  else
    body(float{});
}

constexpr const char* kForward = "the CUDA layer norm forward kernel";
constexpr const char* kBackward = "the CUDA layer norm backward kernel";
constexpr const char* kWeightGradient = "the CUDA layer norm weight gradient kernel";
constexpr const char* kWeightGradientSum = "the CUDA layer norm weight gradient sum kernel";

int row_blocks(std::int64_t rows) {
  return static_cast<int>((rows + kWarps - 1) / kWarps);
}

}  // namespace

std::int64_t layer_norm_partials(std::int64_t rows, std::int64_t width) {
  const std::int64_t per = chunk_rows(rows);
  return 2 * ((rows + per - 1) / per) * width;
}

void launch_layer_norm_forward(const void* x, RowType x_type, const void* branch,
                               RowType branch_type, float* s, void* y, RowType y_type,
                               const float* w, const float* bias, float eps, std::int64_t rows,
                               std::int64_t width, float* mean, float* rstd, void* stream) {
  if (rows <= 0 || width <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  check_before_launch(kForward);
  with_type(x_type, [&](auto xt) {
    with_type(branch_type, [&](auto bt) {
      with_type(y_type, [&](auto yt) {
        using X = decltype(xt);
        using B = decltype(bt);
        using Y = decltype(yt);
        const auto in_registers = with_row_registers(width, [&](auto per) {
          forward_regs_kernel<decltype(per)::value, X, B, Y>
              <<<row_blocks(rows), kWarps * 32, 0, st>>>(
                  static_cast<const X*>(x), static_cast<const B*>(branch), s, static_cast<Y*>(y), w,
                  bias, eps, rows, width, mean, rstd);
        });
        if (!in_registers)
          forward_kernel<X, B, Y><<<row_blocks(rows), kWarps * 32, 0, st>>>(
              static_cast<const X*>(x), static_cast<const B*>(branch), s, static_cast<Y*>(y), w,
              bias, eps, rows, width, mean, rstd);
      });
    });
  });
  check_launch(kForward);
}

void launch_layer_norm_backward(const void* s, RowType s_type, const void* dy, RowType dy_type,
                                const void* ds, const float* w, const float* mean,
                                const float* rstd, std::int64_t rows, std::int64_t width, void* dx,
                                void* d_branch, RowType branch_type, float* dw, float* db,
                                float* partial, void* stream) {
  if (rows <= 0 || width <= 0) return;
  auto st = static_cast<cudaStream_t>(stream);
  const std::int64_t per = chunk_rows(rows), chunks = (rows + per - 1) / per;
  const dim3 column_grid(static_cast<unsigned>((width + kColumns - 1) / kColumns),
                         static_cast<unsigned>(chunks));
  check_before_launch(kBackward);
  with_type(s_type, [&](auto stype) {
    with_type(dy_type, [&](auto gtype) {
      using S = decltype(stype);
      using G = decltype(gtype);
      bool in_registers = false;
      with_type(branch_type, [&](auto btype) {
        using B = decltype(btype);
        in_registers = with_row_registers(width, [&](auto regs) {
          backward_regs_kernel<decltype(regs)::value, S, G, B>
              <<<static_cast<unsigned>(chunks), kWarps * 32, 0, st>>>(
                  static_cast<const S*>(s), static_cast<const G*>(dy), static_cast<const S*>(ds), w,
                  mean, rstd, rows, width, per, static_cast<S*>(dx), static_cast<B*>(d_branch),
                  partial);
        });
        if (!in_registers)
          backward_kernel<S, G, B><<<row_blocks(rows), kWarps * 32, 0, st>>>(
              static_cast<const S*>(s), static_cast<const G*>(dy), static_cast<const S*>(ds), w,
              mean, rstd, rows, width, static_cast<S*>(dx), static_cast<B*>(d_branch));
      });
      check_launch(kBackward);
      if (!in_registers) {
        param_partials_kernel<S, G>
            <<<column_grid, kColumns, 0, st>>>(static_cast<const S*>(s), static_cast<const G*>(dy),
                                               mean, rstd, rows, width, per, partial);
        check_launch(kWeightGradient);
      }
    });
  });
  // partial: [chunk][dw, db][width].
  chunks_sum_kernel<2, float>
      <<<static_cast<unsigned>((width + 31) / 32), kChunkSumWarps * 32, 0, st>>>(
          partial, chunks, width, ChunkSumOut<2, float>{{dw, db}});
  check_launch(kWeightGradientSum);
}

}  // namespace wick::cuda
