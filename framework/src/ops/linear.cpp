// wick::linear (wick/linear.hpp): on a GPU in bf16 an autograd function whose backward makes
// the parameters' gradients in their own types (ops/bf16_products.hpp); elsewhere at::linear.
#include "ops/linear.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Optional.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>

#include "cuda/own_kernels.hpp"
#include "loop/flops.hpp"
#include "ops/bf16_products.hpp"
#include "wick/linear.hpp"

namespace wick {
namespace {

namespace ag = torch::autograd;

// Saved: the input rows and the weight in the compute type, which the backward's products read.
class Bf16Linear : public ag::Function<Bf16Linear> {
 public:
  // The bias optional: an autograd function takes no undefined tensor.
  static at::Tensor forward(ag::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const c10::optional<at::Tensor>& b, at::ScalarType type) {
    const auto x2 = x.reshape({-1, x.size(-1)}).to(type);
    const auto wc = param_as(w, type);
    // The bias in the product's epilogue, as at::linear adds it.
    const bool bias = b.has_value();
    const auto y = bias ? at::addmm(param_as(*b, type), x2, wc.t()) : at::mm(x2, wc.t());
    ctx->save_for_backward({x2, wc});
    ctx->saved_data["x_type"] = static_cast<std::int64_t>(x.scalar_type());
    ctx->saved_data["w_type"] = static_cast<std::int64_t>(w.scalar_type());
    ctx->saved_data["b_type"] = static_cast<std::int64_t>(bias ? b->scalar_type() : at::kFloat);
    ctx->saved_data["bias"] = bias;
    ctx->saved_data["x_shape"] = x.sizes().vec();
    auto shape = x.sizes().vec();
    shape.back() = wc.size(0);
    // Not a view (at::linear's result is none): an in-place change of a view made inside an
    // autograd function is refused.
    return at::_unsafe_view(y, shape);
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    // The saved weight was cast without a graph: a second derivative through it would be
    // silently wrong.
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "wick::linear on a GPU in bf16 has no second derivative (backward with "
                "create_graph): use at::linear there");
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &wc = saved[1];
    const auto type = [&](const char* key) {
      return static_cast<at::ScalarType>(ctx->saved_data[key].toInt());
    };
    const auto dy = grads[0].reshape({-1, wc.size(0)}).to(x2.scalar_type());
    ag::variable_list out(4);
    if (ctx->needs_input_grad(0))
      out[0] = at::mm(dy, wc).view(ctx->saved_data["x_shape"].toIntVector()).to(type("x_type"));
    if (ctx->needs_input_grad(1)) out[1] = product_as(dy.t(), x2, type("w_type"));
    // (needs_input_grad counts the tensors given: the bias is the third when there is one.)
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2))
      out[2] = rows_sum_as(dy, type("b_type"));
    return out;
  }
};

}  // namespace

at::Tensor linear_in(at::ScalarType type, const at::Tensor& x, const at::Tensor& weight,
                     const at::Tensor& bias) {
  // The FLOP count's: the products inside run without grad mode, though a backward follows.
  const CountWithBackward counted(
      at::GradMode::is_enabled() &&
      (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad())));
  return Bf16Linear::apply(x, weight,
                           bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt, type);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  // Without a graph to build there is no backward to change: at::linear keeps autocast's cache
  // of cast weights. A bias other than [out] (one addmm broadcasts) keeps at::linear too.
  if (at::GradMode::is_enabled() && weight.defined() && weight.dim() == 2 &&
      (!bias.defined() || bias.dim() == 1) && takes_bf16_products(x, {&weight, &bias}) &&
      !cuda::hidden(cuda::OwnKernel::linear))
    return linear_in(at::kBFloat16, x, weight, bias);
  return at::linear(x, weight, bias);
}

}  // namespace wick
