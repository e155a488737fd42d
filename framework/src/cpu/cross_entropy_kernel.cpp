#include "cpu/cross_entropy_kernel.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/isa.hpp"
#include "cpu/vec_math.hpp"

namespace wick::cpu {
namespace {

// The row's maximum and sum of exp(x - shift), 16 lanes at a time (Floats16), the lanes folded
// at the end. NaNs are passed over by the maximum (the sum carries them).
WICK_ALWAYS_INLINE float row_max(const float* x, std::int64_t n) {
  constexpr float lowest = -std::numeric_limits<float>::infinity();
  Floats16 lane = splat<Floats16>(lowest);
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const Floats16 v = load16(x + j);
    lane = v > lane ? v : lane;
  }
  float m = lowest;
  for (int l = 0; l < 16; ++l) m = lane[l] > m ? lane[l] : m;
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

WICK_ALWAYS_INLINE float row_sum_exp(const float* x, std::int64_t n, float shift) {
  Floats16 lane = {};
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) lane += exp(load16(x + j) - shift);
  float s = 0;
  for (int l = 0; l < 16; ++l) s += lane[l];
  for (; j < n; ++j) s += exp(x[j] - shift);
  return s;
}

WICK_ALWAYS_INLINE void rows_loop(const float* logits, const std::int64_t* target,
                                  std::int64_t rows, std::int64_t classes,
                                  std::int64_t ignore_index, float* loss, float* stats) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * classes;
    const float m = row_max(x, classes);
    // A row of -inf keeps LibTorch's answer (its shift would be -inf - -inf); a +inf (or a NaN)
    // makes the row's loss and gradient NaN, as LibTorch's log_softmax (inf - inf) and the
    // CUDA kernel do: a shift of 0 made the loss +inf and only some gradients NaN.
    const float shift = m == -std::numeric_limits<float>::infinity() ? 0.f : m;
    const float log_sum = std::log(row_sum_exp(x, classes, shift));
    stats[2 * r] = shift;
    stats[2 * r + 1] = log_sum;
    loss[r] = target[r] == ignore_index ? 0.f : (shift - x[target[r]]) + log_sum;
  }
}

WICK_ALWAYS_INLINE void grad_loop(const float* logits, const std::int64_t* target,
                                  const float* stats, std::int64_t rows, std::int64_t classes,
                                  std::int64_t ignore_index, float scale, float* grad) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * classes;
    float* g = grad + r * classes;
    if (target[r] == ignore_index) {
      for (std::int64_t j = 0; j < classes; ++j) g[j] = 0.f;
      continue;
    }
    const float shift = stats[2 * r], log_sum = stats[2 * r + 1];
    for (std::int64_t j = 0; j < classes; ++j) g[j] = exp((x[j] - shift) - log_sum) * scale;
    g[target[r]] -= scale;
  }
}

// Bfloat16 logits: each row widened into a float buffer, then the float loops; the gradient
// narrowed from one.
WICK_ALWAYS_INLINE void rows_loop(const Bf16* logits, const std::int64_t* target, std::int64_t rows,
                                  std::int64_t classes, std::int64_t ignore_index, float* loss,
                                  float* stats) {
  std::vector<float> x(static_cast<std::size_t>(classes));
  for (std::int64_t r = 0; r < rows; ++r) {
    widen(logits + r * classes, x.data(), classes);
    rows_loop(x.data(), target + r, 1, classes, ignore_index, loss + r, stats + 2 * r);
  }
}

WICK_ALWAYS_INLINE void grad_loop(const Bf16* logits, const std::int64_t* target,
                                  const float* stats, std::int64_t rows, std::int64_t classes,
                                  std::int64_t ignore_index, float scale, Bf16* grad) {
  std::vector<float> x(static_cast<std::size_t>(classes)), g(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    widen(logits + r * classes, x.data(), classes);
    grad_loop(x.data(), target + r, stats + 2 * r, 1, classes, ignore_index, scale, g.data());
    narrow(g.data(), grad + r * classes, classes);
  }
}

}  // namespace

WICK_CPU_DISPATCH(cross_entropy_rows, rows_loop,
                  (const float* logits, const std::int64_t* target, std::int64_t rows,
                   std::int64_t classes, std::int64_t ignore_index, float* loss, float* stats),
                  (logits, target, rows, classes, ignore_index, loss, stats))
WICK_CPU_DISPATCH(cross_entropy_rows, rows_loop,
                  (const Bf16* logits, const std::int64_t* target, std::int64_t rows,
                   std::int64_t classes, std::int64_t ignore_index, float* loss, float* stats),
                  (logits, target, rows, classes, ignore_index, loss, stats))
WICK_CPU_DISPATCH(cross_entropy_grad, grad_loop,
                  (const float* logits, const std::int64_t* target, const float* stats,
                   std::int64_t rows, std::int64_t classes, std::int64_t ignore_index, float scale,
                   float* grad),
                  (logits, target, stats, rows, classes, ignore_index, scale, grad))
WICK_CPU_DISPATCH(cross_entropy_grad, grad_loop,
                  (const Bf16* logits, const std::int64_t* target, const float* stats,
                   std::int64_t rows, std::int64_t classes, std::int64_t ignore_index, float scale,
                   Bf16* grad),
                  (logits, target, stats, rows, classes, ignore_index, scale, grad))

}  // namespace wick::cpu
