// Which vector instructions wick's own CPU kernels run: WICK_CPU_DISPATCH compiles a kernel's
// loop for AVX-512 and for AVX2 beside the build's baseline and runs the best the CPU has, so
// the build assumes nothing of the machine.
#pragma once

#define WICK_ALWAYS_INLINE inline __attribute__((always_inline))

namespace wick::cpu {

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
