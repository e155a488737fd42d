// Branch-free float math for wick's own CPU kernels: loops written with it vectorise (it calls
// nothing in libm), and WICK_CPU_DISPATCH compiles such a loop for AVX-512 and for AVX2 beside
// the build's baseline and runs the best the CPU has, so the build assumes nothing of the
// machine. Files that use it are compiled with -fno-trapping-math (framework/CMakeLists.txt):
// without it GCC will not vectorise a float compare-and-select; LibTorch runs with
// floating-point traps off, so no result changes.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#define WICK_ALWAYS_INLINE inline __attribute__((always_inline))

namespace wick::cpu {

WICK_ALWAYS_INLINE float bits_to_float(std::int32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

WICK_ALWAYS_INLINE std::int32_t float_to_bits(float f) {
  std::int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}

WICK_ALWAYS_INLINE float clamp(float z, float lo, float hi) {
  z = z < lo ? lo : z;
  return z > hi ? hi : z;
}

// e^z within 2 ulp for z in [-87, 88] (the normal floats' range: e^-87 is 1.6e-38, e^88
// 1.7e38), 0 below and infinity above; NaN stays NaN. z = n ln 2 + r with |r| <= ln 2 / 2 (ln 2
// in two parts, so that r stays exact), e^r by its Taylor series to r^6 (error below
// r^7 / 7! = 1.2e-7), 2^n built in the exponent's bits.
WICK_ALWAYS_INLINE float exp(float z) {
  const float zc = clamp(z, -87.f, 88.f);
  constexpr float round_shift = 12582912.f;  // 1.5 x 2^23: adding it rounds to an integer
  float t = zc * 1.44269504f + round_shift;
  const std::int32_t n = float_to_bits(t) - float_to_bits(round_shift);
  t -= round_shift;
  float r = zc - t * 0.693145752f;
  r -= t * 1.42860677e-6f;
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const float e = p * bits_to_float((n + 127) << 23);
  return z < -87.f ? 0.f : z > 88.f ? std::numeric_limits<float>::infinity() : e;
}

// 1 / (1 + e^-z), 0 and 1 at the ends.
WICK_ALWAYS_INLINE float sigmoid(float z) {
  return 1.f / (1.f + exp(-z));
}

#if defined(__x86_64__) || defined(__i386__)
enum class Isa { baseline, avx2, avx512 };
// The best of the three this CPU runs, as wick::cpu_features() sees it: WICK_CPU_DISABLE=avx512f
// runs the AVX2 loops, =avx2 the baseline ones (README: CPU paths).
Isa cpu_isa();

// Defines `void name params`, which runs `loop args` (an always-inline function holding the
// kernel's loop) compiled for the best instruction set the CPU has.
#define WICK_CPU_DISPATCH(name, loop, params, args)                              \
  __attribute__((target("avx512f,avx2,fma"))) static void name##_avx512 params { \
    loop args;                                                                   \
  }                                                                              \
  __attribute__((target("avx2,fma"))) static void name##_avx2 params {           \
    loop args;                                                                   \
  }                                                                              \
  static void name##_baseline params {                                           \
    loop args;                                                                   \
  }                                                                              \
  void name params {                                                             \
    switch (::wick::cpu::cpu_isa()) {                                            \
      case ::wick::cpu::Isa::avx512:                                             \
        return name##_avx512 args;                                               \
      case ::wick::cpu::Isa::avx2:                                               \
        return name##_avx2 args;                                                 \
      default:                                                                   \
        return name##_baseline args;                                             \
    }                                                                            \
  }
#else
#define WICK_CPU_DISPATCH(name, loop, params, args) \
  void name params {                                \
    loop args;                                      \
  }
#endif

}  // namespace wick::cpu
