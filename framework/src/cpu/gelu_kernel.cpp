#include "cpu/gelu_kernel.hpp"

#include <cstdint>

#include "cpu/isa.hpp"
#include "cpu/vec_math.hpp"

namespace wick::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608f, kCubic = 0.044715f;

// 1 + tanh(u) = 2 sigmoid(2u), so y = x sigmoid(2u): one exponential, no cancellation near 0.
WICK_ALWAYS_INLINE void gelu_forward_loop(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i], u = kSqrt2OverPi * (v + kCubic * v * v * v);
    y[i] = v * sigmoid(2.f * u);
  }
}

// d/dx [x s(2u)] = s + 2 x s (1 - s) u', s = sigmoid(2u), u' = sqrt(2 / pi) (1 + 3 0.044715 x^2).
// Past |x| = 20 the second term is 0 in float (s is 0 or 1): it takes x clamped there, so that
// a huge x, whose u' overflows, gives slope 1 or 0 rather than 0 x infinity (LibTorch's NaN).
WICK_ALWAYS_INLINE void gelu_backward_loop(const float* dy, const float* x, float* dx,
                                           std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i], u = kSqrt2OverPi * (v + kCubic * v * v * v), s = sigmoid(2.f * u);
    const float vc = clamp(v, -20.f, 20.f);
    const float du = kSqrt2OverPi * (1.f + 3.f * kCubic * vc * vc);
    dx[i] = dy[i] * (s + 2.f * vc * s * (1.f - s) * du);
  }
}

}  // namespace

WICK_CPU_DISPATCH(gelu_tanh_forward, gelu_forward_loop, (const float* x, float* y, std::int64_t n),
                  (x, y, n))
WICK_CPU_DISPATCH(gelu_tanh_backward, gelu_backward_loop,
                  (const float* dy, const float* x, float* dx, std::int64_t n), (dy, x, dx, n))

}  // namespace wick::cpu
