#include "optim/adam_pass.hpp"

#include <cmath>
#include <cstdint>

namespace wick {

namespace {

// The loop, inlined into each clone below (clang cannot multiversion a template).
template <bool kDecay>
inline __attribute__((always_inline)) void pass(float* __restrict p, const float* __restrict g,
                                                float* __restrict m, float* __restrict v,
                                                std::int64_t n, float beta1, float beta2,
                                                float step_size, float bc2_sqrt, float eps,
                                                float decay, float shrink) {
  for (std::int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    if (kDecay) gi += decay * p[i];
    const float mi = m[i] * beta1 + (1 - beta1) * gi;
    const float vi = v[i] * beta2 + (1 - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    // shrink is 1 but for AdamW (exact: x * 1 == x).
    p[i] = p[i] * shrink - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

// Compiled for AVX-512, AVX2 and the x86-64 baseline; the loader picks one at start.
__attribute__((target_clones("avx512f", "avx2", "default"))) void pass_decay(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    std::int64_t n, float beta1, float beta2, float step_size, float bc2_sqrt, float eps,
    float decay, float shrink) {
  pass<true>(p, g, m, v, n, beta1, beta2, step_size, bc2_sqrt, eps, decay, shrink);
}
__attribute__((target_clones("avx512f", "avx2", "default"))) void pass_plain(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    std::int64_t n, float beta1, float beta2, float step_size, float bc2_sqrt, float eps,
    float shrink) {
  pass<false>(p, g, m, v, n, beta1, beta2, step_size, bc2_sqrt, eps, 0, shrink);
}

}  // namespace

void adam_pass(float* p, const float* g, float* m, float* v, std::int64_t n, float beta1,
               float beta2, float step_size, float bc2_sqrt, float eps, float decay, float shrink) {
  if (decay != 0)
    pass_decay(p, g, m, v, n, beta1, beta2, step_size, bc2_sqrt, eps, decay, shrink);
  else
    pass_plain(p, g, m, v, n, beta1, beta2, step_size, bc2_sqrt, eps, shrink);
}

}  // namespace wick
