// A CPU tensor's elements as wick's kernels (framework/src/cpu) take them: float32 as float,
// LibTorch's bfloat16 as cpu::Bf16 (the same bits).
#pragma once

#include <ATen/core/Tensor.h>

#include "cpu/bf16.hpp"

namespace wick {

// The element types the kernels take.
inline bool cpu_kernel_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16;
}

template <class T>
T* cpu_data(const at::Tensor& x);
template <>
inline float* cpu_data<float>(const at::Tensor& x) {
  return x.data_ptr<float>();
}
template <>
inline cpu::Bf16* cpu_data<cpu::Bf16>(const at::Tensor& x) {
  static_assert(sizeof(at::BFloat16) == sizeof(cpu::Bf16));
  return reinterpret_cast<cpu::Bf16*>(x.data_ptr<at::BFloat16>());
}

// body(T{}) with T the kernels' type for t (a cpu_kernel_type): float or cpu::Bf16.
template <class Body>
decltype(auto) with_cpu_type(at::ScalarType t, const Body& body) {
  return t == at::kBFloat16 ? body(cpu::Bf16{}) : body(float{});
}

}  // namespace wick
