// wick::scaled_dot_product_attention (wick/attention.hpp): for the shapes cpu/attention_kernel
// takes, an autograd function over its kernels, one head per task on LibTorch's threads;
// elsewhere LibTorch's attention.
#include "wick/attention.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/attention_kernel.hpp"

namespace wick {
namespace {

namespace ag = torch::autograd;

// Heads per task: a head of 64 tokens is a few microseconds.
constexpr std::int64_t kHeadGrain = 4;

bool kernel_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p) {
  if (dropout_p != 0 || q.dim() != 4 || q.sizes() != k.sizes() || q.sizes() != v.sizes())
    return false;
  for (const auto* x : {&q, &k, &v})
    if (!x->device().is_cpu() || x->scalar_type() != at::kFloat || x->layout() != at::kStrided)
      return false;
  const auto tokens = q.size(2), width = q.size(3);
  return tokens >= 1 && tokens <= cpu::kAttentionMaxTokens && width == cpu::kAttentionHeadSize &&
         q.size(0) > 0 && q.size(1) > 0;
}

// x with its last dimension contiguous (a view, when it is already).
at::Tensor unit_rows(const at::Tensor& x) {
  return x.stride(3) == 1 ? x : x.contiguous();
}

// [batch, heads, L, E] views of a new [batch, L, heads, E] tensor: what the kernels write.
at::Tensor new_rows(const at::Tensor& like) {
  return at::empty({like.size(0), like.size(2), like.size(1), like.size(3)}, like.options())
      .transpose(1, 2);
}

// Head (b, h)'s rows of x [batch, heads, L, E].
cpu::Rows rows_of(const at::Tensor& x, std::int64_t b, std::int64_t h) {
  return {x.data_ptr<float>() + b * x.stride(0) + h * x.stride(1), x.stride(2)};
}
cpu::ConstRows input_rows(const at::Tensor& x, std::int64_t b, std::int64_t h) {
  const auto r = rows_of(x, b, h);
  return {r.data, r.stride};
}

// The head's sizes and inputs.
cpu::AttentionHead head_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           bool causal, std::int64_t b, std::int64_t h) {
  cpu::AttentionHead a;
  a.tokens = q.size(2);
  a.causal = causal;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  a.q = input_rows(q, b, h);
  a.k = input_rows(k, b, h);
  a.v = input_rows(v, b, h);
  return a;
}

// Runs `body(b, h, n, scratch)` for every head (b, h), the n-th of batch x heads; a task's
// scratch is shared by its heads.
template <class Body>
void for_each_head(const at::Tensor& q, const Body& body) {
  const auto heads = q.size(1);
  const auto scratch_floats = cpu::attention_scratch_floats(q.size(2));
  at::parallel_for(0, q.size(0) * heads, kHeadGrain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scratch(static_cast<std::size_t>(scratch_floats));
    for (auto n = begin; n < end; ++n) body(n / heads, n % heads, n, scratch.data());
  });
}

// The output, and the probabilities into `probs` [batch x heads, L, padded L] when defined.
at::Tensor forward_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                         at::Tensor probs) {
  auto out = new_rows(q);
  const auto padded = cpu::attention_padded(q.size(2));
  for_each_head(q, [&](std::int64_t b, std::int64_t h, std::int64_t n, float* scratch) {
    auto a = head_of(q, k, v, causal, b, h);
    a.out = rows_of(out, b, h);
    if (probs.defined()) a.probs = probs.data_ptr<float>() + n * q.size(2) * padded;
    cpu::attention_forward(a, scratch);
  });
  return out;
}

class CpuAttention : public ag::Function<CpuAttention> {
 public:
  static at::Tensor forward(ag::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, bool causal) {
    auto probs = at::empty({q.size(0) * q.size(1), q.size(2), cpu::attention_padded(q.size(2))},
                           q.options());
    auto out = forward_heads(q, k, v, causal, probs);
    ctx->save_for_backward({q, k, v, out, probs});
    ctx->saved_data["causal"] = causal;
    return out;
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &probs = saved[4];
    const auto d_out = unit_rows(grads[0]);
    auto d_q = new_rows(q), d_k = new_rows(q), d_v = new_rows(q);
    const bool causal = ctx->saved_data["causal"].toBool();
    const auto padded = cpu::attention_padded(q.size(2));
    for_each_head(q, [&](std::int64_t b, std::int64_t h, std::int64_t n, float* scratch) {
      auto a = head_of(q, k, v, causal, b, h);
      a.out = rows_of(out, b, h);  // read only in the backward
      a.probs = probs.data_ptr<float>() + n * q.size(2) * padded;
      a.d_out = input_rows(d_out, b, h);
      a.d_q = rows_of(d_q, b, h);
      a.d_k = rows_of(d_k, b, h);
      a.d_v = rows_of(d_v, b, h);
      cpu::attention_backward(a, scratch);
    });
    return {d_q, d_k, d_v, at::Tensor()};
  }
};

}  // namespace

at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                        const at::Tensor& v, double dropout_p, bool is_causal) {
  if (kernel_takes(q, k, v, dropout_p)) {
    const auto qu = unit_rows(q), ku = unit_rows(k), vu = unit_rows(v);
    if (at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()))
      return CpuAttention::apply(qu, ku, vu, is_causal);
    return forward_heads(qu, ku, vu, is_causal, at::Tensor());
  }
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, dropout_p, is_causal);
#else
  auto att = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (is_causal) {
    const auto future = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(1);
    att = att.masked_fill(future, -std::numeric_limits<double>::infinity());
  }
  att = att.softmax(-1);
  if (dropout_p > 0) att = at::dropout(att, dropout_p, /*train=*/true);
  return at::matmul(att, v);
#endif
}

}  // namespace wick
