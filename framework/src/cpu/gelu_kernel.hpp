// GELU with the tanh approximation (GPT-2's) on float32 or bfloat16 arrays (computed in float),
// forward and backward, each one vectorised pass (vec_math.hpp). wick::gelu_tanh
// (ops/gelu.cpp) runs them on the CPU.
#pragma once

#include <cstdint>

#include "cpu/bf16.hpp"

namespace wick::cpu {

// y = x / 2 (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), for n values.
void gelu_tanh_forward(const float* x, float* y, std::int64_t n);
void gelu_tanh_forward(const Bf16* x, Bf16* y, std::int64_t n);
// dx = dy dy/dx at x, for n values.
void gelu_tanh_backward(const float* dy, const float* x, float* dx, std::int64_t n);
void gelu_tanh_backward(const Bf16* dy, const Bf16* x, Bf16* dx, std::int64_t n);

}  // namespace wick::cpu
