// A bfloat16 as its bits (a float's upper half): how wick's CPU kernels take LibTorch's
// at::BFloat16 arrays, whose layout is the same (may_alias: read through this type, they are
// not another type's objects to the optimiser). vec_math.hpp converts single values.
#pragma once

#include <cstdint>

namespace wick::cpu {

struct __attribute__((may_alias)) Bf16 {
  std::uint16_t bits;
};

// Rows of `width` values between bfloat16 rows `stride` apart and dense float rows: widened
// exactly, narrowed to nearest even (a NaN stays NaN), as LibTorch converts.
void widen_rows(const Bf16* x, std::int64_t stride, std::int64_t rows, std::int64_t width,
                float* y);
void narrow_rows(const float* x, std::int64_t rows, std::int64_t width, Bf16* y,
                 std::int64_t stride);

}  // namespace wick::cpu
