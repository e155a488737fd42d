// wick::gelu_mlp (wick/activations.hpp): on a GPU in bf16 an autograd function whose products
// carry the GELU and its gradient in cuBLASLt's epilogues (cuda/gelu_gemm.cpp, in the CUDA
// module); elsewhere linear, gelu_tanh, linear.
#include "ops/gelu_mlp.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "cuda/cuda_support.hpp"
#include "ops/autocast.hpp"
#include "ops/cpu_data.hpp"
#include "wick/activations.hpp"
#include "wick/torch_compat.hpp"

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
    const auto w1c = w1.to(type).contiguous(), w2c = w2.to(type).contiguous();
    const auto b1c = b1.to(type).contiguous();
    auto pre = at::empty({x2.size(0), w1c.size(0)}, x2.options());
    auto h = at::empty_like(pre);
    if (!x2.is_cuda() || !cuda::gelu_gemm_forward(x2, w1c, b1c, h, pre)) {
      at::addmm_out(pre, b1c, x2, w1c.t());
      h = at::gelu(pre, "tanh");
    }
    const auto y = at::addmm(b2.to(type), h, w2c.t());
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
    const auto as = [&](const at::Tensor& g, std::size_t i) {
      return g.to(static_cast<at::ScalarType>(types[i]));
    };
    const auto dy = grads[0].reshape({-1, w2c.size(0)}).to(x2.scalar_type()).contiguous();
    auto d_pre = at::empty_like(pre);
    auto db1 = at::empty({pre.size(1)}, pre.options());
    if (!dy.is_cuda() || !cuda::gelu_gemm_backward(dy, w2c, pre, d_pre, db1)) {
      d_pre = at::gelu_backward(at::mm(dy, w2c), pre, "tanh");
      db1 = d_pre.sum(0);
    }
    ag::variable_list out(6);
    if (ctx->needs_input_grad(0))
      out[0] = as(at::mm(d_pre, w1c).view(ctx->saved_data["x_shape"].toIntVector()), 0);
    if (ctx->needs_input_grad(1)) out[1] = as(at::mm(d_pre.t(), x2), 1);
    if (ctx->needs_input_grad(2)) out[2] = as(db1, 2);
    if (ctx->needs_input_grad(3)) out[3] = as(at::mm(dy.t(), h), 3);
    if (ctx->needs_input_grad(4)) out[4] = as(dy.sum(0), 4);
    return out;
  }
};

// Whether gelu_mlp's function takes these, in bf16: on a GPU, float32 or bf16 tensors under
// bf16 autocast (which would cast them for the products), or every tensor bf16 and autocast off.
bool fused_in_bf16(const at::Tensor& x, std::initializer_list<const at::Tensor*> params) {
  if (!x.defined() || !x.is_cuda() || x.dim() < 1 || x.numel() == 0) return false;
  bool all_bf16 = true;
  const auto takes = [&](const at::Tensor& t) {
    if (!t.defined() || t.device() != x.device() || t.layout() != at::kStrided ||
        !cpu_kernel_type(t.scalar_type()))
      return false;
    all_bf16 = all_bf16 && t.scalar_type() == at::kBFloat16;
    return true;
  };
  if (!takes(x)) return false;
  for (const auto* p : params)
    if (!takes(*p)) return false;
  // Another autocast type would cast bf16 tensors to it for the products.
  return bf16_autocast(at::kCUDA) || (all_bf16 && !compat::autocast_enabled(at::kCUDA));
}

}  // namespace

at::Tensor gelu_mlp_in(at::ScalarType type, const at::Tensor& x, const at::Tensor& fc_weight,
                       const at::Tensor& fc_bias, const at::Tensor& proj_weight,
                       const at::Tensor& proj_bias) {
  return GeluMlp::apply(x, fc_weight, fc_bias, proj_weight, proj_bias, type);
}

at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
                    const at::Tensor& proj_weight, const at::Tensor& proj_bias) {
  if (fused_in_bf16(x, {&fc_weight, &fc_bias, &proj_weight, &proj_bias}))
    return gelu_mlp_in(at::kBFloat16, x, fc_weight, fc_bias, proj_weight, proj_bias);
  return at::linear(gelu_tanh(at::linear(x, fc_weight, fc_bias)), proj_weight, proj_bias);
}

}  // namespace wick
