// Branch-free float math for wick's own CPU kernels: loops written with it vectorise (it calls
// nothing in libm; cpu/isa.hpp compiles them for each instruction set). Files that use it are
// compiled with -fno-trapping-math (framework/CMakeLists.txt): without it GCC will not vectorise
// a float compare-and-select; LibTorch runs with floating-point traps off, so no result changes.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/bf16.hpp"
#include "cpu/isa.hpp"  // WICK_ALWAYS_INLINE

namespace wick::cpu {

// 16 floats (and 16 int32s) as one value: what a row reduction accumulates in, so that it
// vectorises without reassociating a float sum (which compilers do not do on their own). The
// compiler lowers it to one AVX-512 register, two AVX2 ones or four SSE ones.
typedef float Floats16 __attribute__((vector_size(64)));
typedef std::int32_t Ints16 __attribute__((vector_size(64)));

template <class F>
struct IntsOf {
  using type = std::int32_t;
};
template <>
struct IntsOf<Floats16> {
  using type = Ints16;
};

// The same bits read as the other type (float <-> int32, Floats16 <-> Ints16).
template <class To, class From>
WICK_ALWAYS_INLINE To bit_cast(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

// c in every lane of F (float or Floats16).
template <class F>
WICK_ALWAYS_INLINE F splat(float c) {
  return F{} + c;
}

template <class F>
WICK_ALWAYS_INLINE F clamp(F z, float lo, float hi) {
  z = z < splat<F>(lo) ? splat<F>(lo) : z;
  return z > splat<F>(hi) ? splat<F>(hi) : z;
}

// e^z within 2 ulp for z in [-87, 88] (the normal floats' range: e^-87 is 1.6e-38, e^88
// 1.7e38), 0 below and infinity above; NaN stays NaN. z = n ln 2 + r with |r| <= ln 2 / 2 (ln 2
// in two parts, so that r stays exact), e^r by its Taylor series to r^6 (error below
// r^7 / 7! = 1.2e-7), 2^n built in the exponent's bits. F: float, or Floats16 for 16 at once.
template <class F>
WICK_ALWAYS_INLINE F exp(F z) {
  using I = typename IntsOf<F>::type;
  const F zc = clamp(z, -87.f, 88.f);
  constexpr float round_shift = 12582912.f;  // 1.5 x 2^23: adding it rounds to an integer
  F t = zc * 1.44269504f + round_shift;
  const I n = bit_cast<I>(t) - bit_cast<std::int32_t>(round_shift);
  t -= round_shift;
  F r = zc - t * 0.693145752f;
  r -= t * 1.42860677e-6f;
  F p = splat<F>(1.f / 720);
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const F e = p * bit_cast<F>((n + 127) << 23);
  const F zero = splat<F>(0.f), inf = splat<F>(std::numeric_limits<float>::infinity());
  return z < splat<F>(-87.f) ? zero : z > splat<F>(88.f) ? inf : e;
}

// 1 / (1 + e^-z), 0 and 1 at the ends.
WICK_ALWAYS_INLINE float sigmoid(float z) {
  return 1.f / (1.f + exp(-z));
}

// Floats16 from 16 floats at `p` (any alignment).
WICK_ALWAYS_INLINE Floats16 load16(const float* p) {
  Floats16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The sum and the maximum of the 16 lanes: halves folded onto each other, four steps.
WICK_ALWAYS_INLINE float lanes_sum(Floats16 x) {
#if defined(__has_builtin) && __has_builtin(__builtin_shufflevector)
  x += __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  x += __builtin_shufflevector(x, x, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  x += __builtin_shufflevector(x, x, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  x += __builtin_shufflevector(x, x, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return x[0];
#else
  float s = 0;
  for (int l = 0; l < 16; ++l) s += x[l];
  return s;
#endif
}

WICK_ALWAYS_INLINE float lanes_max(Floats16 x) {
#if defined(__has_builtin) && __has_builtin(__builtin_shufflevector)
  Floats16 y = __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  x = y > x ? y : x;
  y = __builtin_shufflevector(x, x, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  x = y > x ? y : x;
  y = __builtin_shufflevector(x, x, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  x = y > x ? y : x;
  y = __builtin_shufflevector(x, x, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  x = y > x ? y : x;
  return x[0];
#else
  float m = x[0];
  for (int l = 1; l < 16; ++l) m = x[l] > m ? x[l] : m;
  return m;
#endif
}

WICK_ALWAYS_INLINE void store16(float* p, Floats16 v) {
  std::memcpy(p, &v, sizeof v);
}

// Bfloat16 values (cpu/bf16.hpp): the kernels compute in float, loaded values widen exactly,
// results round to nearest even once, as LibTorch's conversion does.
WICK_ALWAYS_INLINE float to_float(Bf16 x) {
  return bit_cast<float>(static_cast<std::uint32_t>(x.bits) << 16);
}

// A NaN stays a quiet NaN. The NaN test is on the bits, an integer select: a float compare
// would make it a branch, and the loop would not vectorise.
WICK_ALWAYS_INLINE Bf16 to_bf16(float x) {
  const auto u = bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return Bf16{static_cast<std::uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded)};
}

// n values as floats, and back.
WICK_ALWAYS_INLINE void widen(const Bf16* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = to_float(x[i]);
}
WICK_ALWAYS_INLINE void narrow(const float* x, Bf16* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

}  // namespace wick::cpu
