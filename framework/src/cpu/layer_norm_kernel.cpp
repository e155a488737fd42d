#include "cpu/layer_norm_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/isa.hpp"
#include "cpu/vec_math.hpp"

namespace wick::cpu {
namespace {

// Row sums over 16 lanes (Floats16), folded at the end: they vectorise without reassociating
// a float sum. sum(x), sum((x - m)^2), and sum(g) with sum(g xhat) for the backward.
WICK_ALWAYS_INLINE float row_sum(const float* x, std::int64_t n) {
  Floats16 lane = {};
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) lane += load16(x + j);
  float t = lanes_sum(lane);
  for (; j < n; ++j) t += x[j];
  return t;
}

// sum(x - m) and sum((x - m)^2), for the corrected two-pass mean and variance.
WICK_ALWAYS_INLINE void row_deviations(const float* x, std::int64_t n, float m, float& sum_d,
                                       float& sum_dd) {
  Floats16 ld = {}, ldd = {};
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const Floats16 d = load16(x + j) - m;
    ld += d;
    ldd += d * d;
  }
  sum_d = lanes_sum(ld);
  sum_dd = lanes_sum(ldd);
  for (; j < n; ++j) {
    const float d = x[j] - m;
    sum_d += d;
    sum_dd += d * d;
  }
}

WICK_ALWAYS_INLINE void row_grad_sums(const float* s, const float* dy, const float* w,
                                      std::int64_t n, float m, float rs, float& sum_g,
                                      float& sum_gx) {
  Floats16 lg = {}, lgx = {};
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const Floats16 g = load16(dy + j) * load16(w + j);
    lg += g;
    lgx += g * ((load16(s + j) - m) * rs);
  }
  sum_g = lanes_sum(lg);
  sum_gx = lanes_sum(lgx);
  for (; j < n; ++j) {
    const float g = dy[j] * w[j];
    sum_g += g;
    sum_gx += g * ((s[j] - m) * rs);
  }
}

WICK_ALWAYS_INLINE void forward_loop(const float* x, const float* b, float* s, std::int64_t rows,
                                     std::int64_t width, const float* w, const float* bias,
                                     float eps, float* y, float* mean, float* rstd) {
  const float inv_n = 1.f / static_cast<float>(width);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * width;
    if (b) {
      const float* br = b + r * width;
      float* sr = s + r * width;
      for (std::int64_t j = 0; j < width; ++j) sr[j] = in[j] + br[j];
      in = sr;
    }
    // The first pass's mean is off by its sum's rounding; the deviations from it correct it
    // (and the variance: var = (sum dd - (sum d)^2 / n) / n). Uncorrected, a row of one value
    // repeated got a variance of that rounding, and with a small eps outputs of +-1, not bias.
    const float m0 = row_sum(in, width) / static_cast<float>(width);
    float sum_d, sum_dd;
    row_deviations(in, width, m0, sum_d, sum_dd);
    const float m = m0 + sum_d * inv_n;
    const float var = std::max(0.f, (sum_dd - sum_d * sum_d * inv_n) * inv_n);
    const float rs = 1.f / std::sqrt(var + eps);
    float* yr = y + r * width;
    for (std::int64_t j = 0; j < width; ++j) yr[j] = (in[j] - m) * rs * w[j] + bias[j];
    mean[r] = m;
    rstd[r] = rs;
  }
}

WICK_ALWAYS_INLINE void backward_loop(const float* s, const float* dy, const float* ds,
                                      std::int64_t rows, std::int64_t width, const float* w,
                                      const float* mean, const float* rstd, float* dx, float* dw,
                                      float* db) {
  const float inv_n = 1.f / static_cast<float>(width);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float *sr = s + r * width, *gr = dy + r * width;
    const float m = mean[r], rs = rstd[r];
    float sum_g, sum_gx;
    row_grad_sums(sr, gr, w, width, m, rs, sum_g, sum_gx);
    const float a = sum_g * inv_n, c = sum_gx * inv_n;
    float* out = dx + r * width;
    // In Floats16 explicitly: written plainly, the stores to dx, dw and db (which might alias
    // for all the compiler knows) kept the loop scalar.
    std::int64_t j = 0;
    for (; j + 16 <= width; j += 16) {
      const Floats16 g = load16(gr + j), xh = (load16(sr + j) - m) * rs;
      store16(out + j, rs * (g * load16(w + j) - a - xh * c));
      store16(dw + j, load16(dw + j) + g * xh);
      store16(db + j, load16(db + j) + g);
    }
    for (; j < width; ++j) {
      const float xh = (sr[j] - m) * rs;
      out[j] = rs * (gr[j] * w[j] - a - xh * c);
      dw[j] += gr[j] * xh;
      db[j] += gr[j];
    }
    if (ds)
      for (std::int64_t j = 0; j < width; ++j) out[j] += ds[r * width + j];
  }
}

}  // namespace

WICK_CPU_DISPATCH(layer_norm_forward, forward_loop,
                  (const float* x, const float* b, float* s, std::int64_t rows, std::int64_t width,
                   const float* w, const float* bias, float eps, float* y, float* mean,
                   float* rstd),
                  (x, b, s, rows, width, w, bias, eps, y, mean, rstd))
WICK_CPU_DISPATCH(layer_norm_backward, backward_loop,
                  (const float* s, const float* dy, const float* ds, std::int64_t rows,
                   std::int64_t width, const float* w, const float* mean, const float* rstd,
                   float* dx, float* dw, float* db),
                  (s, dy, ds, rows, width, w, mean, rstd, dx, dw, db))

}  // namespace wick::cpu
