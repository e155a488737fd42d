// wick::gelu_mlp (wick/activations.hpp): on a GPU in bf16 an autograd function whose first
// product carries the GELU in cuBLASLt's epilogue (cuda/gelu_gemm.cpp, in the CUDA module) and
// whose backward makes every parameter's gradient in its own type; elsewhere linear,
// gelu_tanh, linear.
#include "ops/gelu_mlp.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <initializer_list>
#include <tuple>
#include <vector>

#include "cuda/cuda_support.hpp"
#include "cuda/own_kernels.hpp"
#include "loop/flops.hpp"
#include "ops/bf16_products.hpp"
#include "wick/activations.hpp"

namespace wick {
namespace {

namespace ag = torch::autograd;

// Saved: the input rows, both weights and the first product (pre) and its GELU (h) in the
// compute type, which the backward's four products read.
class GeluMlp : public ag::Function<GeluMlp> {
 public:
  static at::Tensor forward(ag::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w1,
                            const at::Tensor& b1, const at::Tensor& w2, const at::Tensor& b2,
                            at::ScalarType type) {
    const auto x2 = x.reshape({-1, x.size(-1)}).to(type).contiguous();
    const auto w1c = param_as(w1, type).contiguous(), w2c = param_as(w2, type).contiguous();
    const auto b1c = param_as(b1, type).contiguous();
    auto pre = at::empty({x2.size(0), w1c.size(0)}, x2.options());
    auto h = at::empty_like(pre);
    if (!x2.is_cuda() || !cuda::gelu_gemm_forward(x2, w1c, b1c, h, pre)) {
      at::addmm_out(pre, b1c, x2, w1c.t());
      h = at::gelu(pre, "tanh");
    } else {
      // cuBLASLt's product, which the dispatcher did not see.
      count_matmul({1, x2.size(0), x2.size(1), w1c.size(0), static_cast<int>(type)}, true);
    }
    const auto y = at::addmm(param_as(b2, type), h, w2c.t());
    ctx->save_for_backward({x2, w1c, w2c, pre, h});
    std::vector<std::int64_t> types;
    for (const auto* t : {&x, &w1, &b1, &w2, &b2})
      types.push_back(static_cast<std::int64_t>(t->scalar_type()));
    ctx->saved_data["types"] = types;
    ctx->saved_data["x_shape"] = x.sizes().vec();
    auto shape = x.sizes().vec();
    shape.back() = w2c.size(0);
    // Not a view (at::linear's result is none): an in-place change of a view made inside an
    // autograd function is refused.
    return at::_unsafe_view(y, shape);
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    // The saved products were made without a graph: a second derivative through them would
    // be silently wrong.
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "wick::gelu_mlp on a GPU in bf16 has no second derivative (backward with "
                "create_graph): use at::linear, wick::gelu_tanh and at::linear there");
    const auto saved = ctx->get_saved_variables();
    const auto &x2 = saved[0], &w1c = saved[1], &w2c = saved[2], &pre = saved[3], &h = saved[4];
    const auto types = ctx->saved_data["types"].toIntVector();
    const auto type = [&](std::size_t i) { return static_cast<at::ScalarType>(types[i]); };
    // The weights' and the biases' gradients made in their own types (float under autocast)
    // by the products and the sums, not cast after. GELU's gradient outside the product
    // (cuBLASLt's DGELU_BGRAD epilogue ran as a slower pass of its own), with fc_bias's
    // gradient summed in the same pass where wick's kernel takes it.
    const auto dy = grads[0].reshape({-1, w2c.size(0)}).to(x2.scalar_type()).contiguous();
    const auto dh = at::mm(dy, w2c);
    at::Tensor d_pre, d_b1;
    if (ctx->needs_input_grad(2) && pre.scalar_type() == at::kBFloat16 &&
        column_sums_take(pre, type(2))) {
      std::tie(d_pre, d_b1) = cuda::gelu_backward_sums(dh, pre, type(2));
    } else {
      d_pre = at::gelu_backward(dh, pre, "tanh");
      if (ctx->needs_input_grad(2)) d_b1 = rows_sum_as(d_pre, type(2));
    }
    ag::variable_list out(6);
    if (ctx->needs_input_grad(0))
      out[0] = at::mm(d_pre, w1c).view(ctx->saved_data["x_shape"].toIntVector()).to(type(0));
    if (ctx->needs_input_grad(1)) out[1] = product_as(d_pre.t(), x2, type(1));
    out[2] = d_b1;
    if (ctx->needs_input_grad(3)) out[3] = product_as(dy.t(), h, type(3));
    if (ctx->needs_input_grad(4)) out[4] = rows_sum_as(dy, type(4));
    return out;
  }
};

}  // namespace

at::Tensor gelu_mlp_in(at::ScalarType type, const at::Tensor& x, const at::Tensor& fc_weight,
                       const at::Tensor& fc_bias, const at::Tensor& proj_weight,
                       const at::Tensor& proj_bias) {
  // The FLOP count's: the products inside run without grad mode, though a backward follows.
  bool trains = false;
  for (const auto* t : {&x, &fc_weight, &fc_bias, &proj_weight, &proj_bias})
    trains = trains || (t->defined() && t->requires_grad());
  const CountWithBackward counted(at::GradMode::is_enabled() && trains);
  return GeluMlp::apply(x, fc_weight, fc_bias, proj_weight, proj_bias, type);
}

at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
                    const at::Tensor& proj_weight, const at::Tensor& proj_bias) {
  // Without a graph to build (inference, validation), at::linear keeps autocast's cache of
  // cast weights, which a decoder reading the same weights for every token gains from; the
  // function casts them on each call.
  if (at::GradMode::is_enabled() && fc_bias.defined() && proj_bias.defined() &&
      takes_bf16_products(x, {&fc_weight, &fc_bias, &proj_weight, &proj_bias}) &&
      !cuda::hidden(cuda::OwnKernel::gelu_mlp))
    return gelu_mlp_in(at::kBFloat16, x, fc_weight, fc_bias, proj_weight, proj_bias);
  return at::linear(gelu_tanh(at::linear(x, fc_weight, fc_bias)), proj_weight, proj_bias);
}

}  // namespace wick
