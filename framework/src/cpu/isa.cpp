#include "wick/hardware.hpp"

#include "cpu/isa.hpp"

namespace wick::cpu {

#if defined(__x86_64__) || defined(__i386__)
Isa cpu_isa() {
  static const Isa isa = [] {
    const auto& f = cpu_features();
    if (f.avx512f) return Isa::avx512;
    // Every AVX2 CPU of the last decade has FMA; the loops compiled for AVX2 use it.
    if (f.avx2 && __builtin_cpu_supports("fma")) return Isa::avx2;
    return Isa::baseline;
  }();
  return isa;
}
#endif

}  // namespace wick::cpu
