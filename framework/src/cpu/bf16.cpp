#include "cpu/bf16.hpp"

#include <cstdint>

#include "cpu/isa.hpp"
#include "cpu/vec_math.hpp"

namespace wick::cpu {
namespace {

WICK_ALWAYS_INLINE void widen_loop(const Bf16* x, std::int64_t stride, std::int64_t rows,
                                   std::int64_t width, float* y) {
  if (width == 16) {  // an attention head's rows: one vector each, no loop around it
    for (std::int64_t r = 0; r < rows; ++r) widen(x + r * stride, y + r * 16, 16);
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r) widen(x + r * stride, y + r * width, width);
}

WICK_ALWAYS_INLINE void narrow_loop(const float* x, std::int64_t rows, std::int64_t width, Bf16* y,
                                    std::int64_t stride) {
  if (width == 16) {
    for (std::int64_t r = 0; r < rows; ++r) narrow(x + r * 16, y + r * stride, 16);
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r) narrow(x + r * width, y + r * stride, width);
}

}  // namespace

WICK_CPU_DISPATCH(widen_rows, widen_loop,
                  (const Bf16* x, std::int64_t stride, std::int64_t rows, std::int64_t width,
                   float* y),
                  (x, stride, rows, width, y))
WICK_CPU_DISPATCH(narrow_rows, narrow_loop,
                  (const float* x, std::int64_t rows, std::int64_t width, Bf16* y,
                   std::int64_t stride),
                  (x, rows, width, y, stride))

}  // namespace wick::cpu
