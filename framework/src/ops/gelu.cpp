// wick::gelu_tanh (wick/activations.hpp): for float32 and bfloat16 on the CPU, an autograd
// function over wick's kernels (cpu/gelu_kernel.cpp); elsewhere at::gelu.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>

#include "cpu/gelu_kernel.hpp"
#include "ops/cpu_data.hpp"
#include "wick/activations.hpp"

namespace wick {
namespace {

namespace ag = torch::autograd;

// Values per task on LibTorch's threads: big enough that a task outweighs its start.
constexpr std::int64_t kGeluGrain = 32768;

class CpuGeluTanh : public ag::Function<CpuGeluTanh> {
 public:
  static at::Tensor forward(ag::AutogradContext* ctx, const at::Tensor& x) {
    auto y = at::empty_like(x);
    with_cpu_type(x.scalar_type(), [&](auto type) {
      using T = decltype(type);
      const T* in = cpu_data<T>(x);
      T* out = cpu_data<T>(y);
      at::parallel_for(0, x.numel(), kGeluGrain, [&](std::int64_t b, std::int64_t e) {
        cpu::gelu_tanh_forward(in + b, out + b, e - b);
      });
    });
    ctx->save_for_backward({x});
    return y;
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = at::empty_like(x);
    with_cpu_type(x.scalar_type(), [&](auto type) {
      using T = decltype(type);
      const T *g = cpu_data<T>(dy), *in = cpu_data<T>(x);
      T* out = cpu_data<T>(dx);
      at::parallel_for(0, x.numel(), kGeluGrain, [&](std::int64_t b, std::int64_t e) {
        cpu::gelu_tanh_backward(g + b, in + b, out + b, e - b);
      });
    });
    return {dx};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  if (x.device().is_cpu() && cpu_kernel_type(x.scalar_type()) && x.layout() == at::kStrided)
    return CpuGeluTanh::apply(x.contiguous());
  return at::gelu(x, "tanh");
}

}  // namespace wick
