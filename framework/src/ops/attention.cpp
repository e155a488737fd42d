// wick::scaled_dot_product_attention (wick/attention.hpp): for the shapes cpu/attention_kernel
// takes, an autograd function over its kernels, one head per task on LibTorch's threads;
// elsewhere LibTorch's attention. The kernels compute in float: a bfloat16 head's rows are
// widened into the task's scratch once (the kernels read them many times) and its results
// narrowed from there, as LibTorch computes bfloat16 attention in float.
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
#include "cpu/bf16.hpp"
#include "ops/cpu_data.hpp"

namespace wick {
namespace {

namespace ag = torch::autograd;

// Heads per task: a head of 64 tokens is a few microseconds.
constexpr std::int64_t kHeadGrain = 4;

bool kernel_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p) {
  if (dropout_p != 0 || q.dim() != 4 || q.sizes() != k.sizes() || q.sizes() != v.sizes())
    return false;
  for (const auto* x : {&q, &k, &v})
    if (!x->device().is_cpu() || x->scalar_type() != q.scalar_type() ||
        !cpu_kernel_type(x->scalar_type()) || x->layout() != at::kStrided)
      return false;
  const auto tokens = q.size(2), width = q.size(3);
  return tokens >= 1 && tokens <= cpu::kAttentionMaxTokens && width == cpu::kAttentionHeadSize &&
         q.size(0) > 0 && q.size(1) > 0;
}

// x with its last dimension contiguous (a view, when it is already).
at::Tensor unit_rows(const at::Tensor& x) {
  return x.stride(3) == 1 ? x : x.contiguous();
}

// [batch, heads, L, E] views of a new [batch, L, heads, E] tensor of `type`: what the kernels
// write.
at::Tensor new_rows(const at::Tensor& like, at::ScalarType type) {
  return at::empty({like.size(0), like.size(2), like.size(1), like.size(3)},
                   like.options().dtype(type))
      .transpose(1, 2);
}

// Head (b, h)'s rows of x [batch, heads, L, E], of the kernels' type T.
template <class T>
cpu::RowsOf<T> rows_of(const at::Tensor& x, std::int64_t b, std::int64_t h) {
  return {cpu_data<T>(x) + b * x.stride(0) + h * x.stride(1), x.stride(2)};
}

// A task's scratch: the kernels' own, then for bfloat16 heads float rows for each of the head's
// matrices (take() hands out the next).
class Scratch {
 public:
  Scratch(const at::Tensor& q, int matrices)
      : rows_(q.size(2)),
        floats_(static_cast<std::size_t>(
            cpu::attention_scratch_floats(rows_) +
            (q.scalar_type() == at::kFloat ? 0 : matrices * rows_ * kWidth))) {}

  float* kernel() { return floats_.data(); }
  void next_head() { taken_ = 0; }

  // Head (b, h) of x as the kernels read it: x's rows (float32), or a widened copy.
  cpu::Rows read(const at::Tensor& x, std::int64_t b, std::int64_t h) {
    if (x.scalar_type() == at::kFloat) return rows_of<float>(x, b, h);
    float* y = take();
    cpu::widen_rows(rows_of<cpu::Bf16>(x, b, h).data, x.stride(2), rows_, kWidth, y);
    return {y, kWidth};
  }
  // Where the kernels write head (b, h) of x: x's rows (float32), or float rows that written()
  // narrows into x.
  cpu::Rows write(const at::Tensor& x, std::int64_t b, std::int64_t h) {
    if (x.scalar_type() == at::kFloat) return rows_of<float>(x, b, h);
    return {take(), kWidth};
  }
  void written(const at::Tensor& x, std::int64_t b, std::int64_t h, cpu::Rows rows) {
    if (x.scalar_type() != at::kFloat)
      cpu::narrow_rows(rows.data, rows_, kWidth, rows_of<cpu::Bf16>(x, b, h).data, x.stride(2));
  }

 private:
  static constexpr std::int64_t kWidth = cpu::kAttentionHeadSize;
  float* take() {
    return kernel() + cpu::attention_scratch_floats(rows_) + kWidth * rows_ * taken_++;
  }

  std::int64_t rows_;
  std::vector<float> floats_;
  std::int64_t taken_ = 0;
};

cpu::ConstRows in(cpu::Rows r) {
  return {r.data, r.stride};
}

// The head's sizes and inputs.
cpu::AttentionHead head_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           bool causal, std::int64_t b, std::int64_t h, Scratch& scratch) {
  cpu::AttentionHead a;
  a.tokens = q.size(2);
  a.causal = causal;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  a.q = in(scratch.read(q, b, h));
  a.k = in(scratch.read(k, b, h));
  a.v = in(scratch.read(v, b, h));
  return a;
}

// Runs `body(b, h, n, scratch)` for every head (b, h), the n-th of batch x heads; a task's
// scratch, with room for `matrices` bfloat16 matrices, is shared by its heads.
template <class Body>
void for_each_head(const at::Tensor& q, int matrices, const Body& body) {
  const auto heads = q.size(1);
  at::parallel_for(0, q.size(0) * heads, kHeadGrain, [&](std::int64_t begin, std::int64_t end) {
    Scratch scratch(q, matrices);
    for (auto n = begin; n < end; ++n) {
      scratch.next_head();
      body(n / heads, n % heads, n, scratch);
    }
  });
}

// The output, of `type`, and the probabilities into `probs` [batch x heads, L, padded L] when
// defined.
at::Tensor forward_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal,
                         at::Tensor probs, at::ScalarType type) {
  auto out = new_rows(q, type);
  const auto padded = cpu::attention_padded(q.size(2));
  for_each_head(q, 4, [&](std::int64_t b, std::int64_t h, std::int64_t n, Scratch& scratch) {
    auto a = head_of(q, k, v, causal, b, h, scratch);
    a.out = scratch.write(out, b, h);
    if (probs.defined()) a.probs = probs.data_ptr<float>() + n * q.size(2) * padded;
    cpu::attention_forward(a, scratch.kernel());
    scratch.written(out, b, h, a.out);
  });
  return out;
}

class CpuAttention : public ag::Function<CpuAttention> {
 public:
  static at::Tensor forward(ag::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, bool causal) {
    auto probs = at::empty({q.size(0) * q.size(1), q.size(2), cpu::attention_padded(q.size(2))},
                           q.options().dtype(at::kFloat));
    // The output in float for the backward: a bf16 output's rounding would go into its
    // rowsum(dO * O) and from there into every gradient. Returned in q's type.
    auto out = forward_heads(q, k, v, causal, probs, at::kFloat);
    ctx->save_for_backward({q, k, v, out, probs});
    ctx->saved_data["causal"] = causal;
    return out.to(q.scalar_type());
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &probs = saved[4];
    const auto d_out = unit_rows(grads[0].to(q.scalar_type()));
    const auto type = q.scalar_type();
    auto d_q = new_rows(q, type), d_k = new_rows(q, type), d_v = new_rows(q, type);
    const bool causal = ctx->saved_data["causal"].toBool();
    const auto padded = cpu::attention_padded(q.size(2));
    for_each_head(q, 7, [&](std::int64_t b, std::int64_t h, std::int64_t n, Scratch& scratch) {
      auto a = head_of(q, k, v, causal, b, h, scratch);
      a.out = scratch.read(out, b, h);  // read only in the backward
      a.probs = probs.data_ptr<float>() + n * q.size(2) * padded;
      a.d_out = in(scratch.read(d_out, b, h));
      a.d_q = scratch.write(d_q, b, h);
      a.d_k = scratch.write(d_k, b, h);
      a.d_v = scratch.write(d_v, b, h);
      cpu::attention_backward(a, scratch.kernel());
      scratch.written(d_q, b, h, a.d_q);
      scratch.written(d_k, b, h, a.d_k);
      scratch.written(d_v, b, h, a.d_v);
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
    return forward_heads(qu, ku, vu, is_causal, at::Tensor(), q.scalar_type());
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
