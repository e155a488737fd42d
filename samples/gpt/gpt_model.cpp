// The GPT sample's model (gpt_model.hpp): GPT-2's computation in wick's kernels, and its
// decoding from cached keys and values.
#include "gpt_model.hpp"

#include <wick/activations.hpp>
#include <wick/attention.hpp>
#include <wick/linear.hpp>
#include <wick/normalization.hpp>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/init.h>
#include <torch/utils.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

namespace wick_gpt {

namespace nn = torch::nn;

GptShape read_shape(const wick::Params& p) {
  const GptShape s{p.get_int("vocab"), p.get_int("context"), p.get_int("layers"),
                   p.get_int("heads"), p.get_int("width"),   p.get_float("dropout")};
  if (s.vocab < 1) throw p.error("vocab", "must be >= 1");
  if (s.context < 1) throw p.error("context", "must be >= 1 (tokens per window)");
  if (s.layers < 1) throw p.error("layers", "must be >= 1");
  if (s.width < 1) throw p.error("width", "must be >= 1");
  if (s.heads < 1 || s.width % s.heads != 0)
    throw p.error("heads", "must be >= 1 and divide width (" + std::to_string(s.width) +
                               ") evenly, e.g. width 768 with 12 heads");
  if (!(s.dropout >= 0 && s.dropout < 1)) throw p.error("dropout", "must be in [0, 1)");
  return s;
}

namespace {

// x W^T + b as PyTorch's nn.Linear computes it, the bias in the matrix product's epilogue
// (nn::Linear's forward, the C++ frontend's F::linear, multiplies a 3-D input and then adds
// the bias in a separate broadcast add, which under bf16 autocast runs in float against a float
// bias: on an H100, 48 such adds were 6 of a GPT-2 step's 60 ms). wick::linear: on a GPU in
// bf16 the weight's and bias's gradients come out of the products in float, not cast after.
at::Tensor linear(const nn::Linear& l, const at::Tensor& x) {
  return wick::linear(x, l->weight, l->bias);
}

// ln(x), or ln(x + branch) beside x + branch: wick's kernels, one pass each way, where
// nn::LayerNorm would be a residual add, a normalisation and, under bf16 autocast, a cast for
// the matrix product that follows.
std::pair<at::Tensor, at::Tensor> add_norm(const nn::LayerNorm& ln, const at::Tensor& x,
                                           const at::Tensor& branch) {
  const double eps = ln->options.eps();
  if (!branch.defined()) return {x, wick::layer_norm(x, ln->weight, ln->bias, eps)};
  return wick::add_layer_norm(x, branch, ln->weight, ln->bias, eps);
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptShape& s)
    : heads(s.heads), context(s.context), dropout(s.dropout) {
  c_attn = register_module("c_attn", nn::Linear(s.width, 3 * s.width));
  c_proj = register_module("c_proj", nn::Linear(s.width, s.width));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x, KvCache* cache,
                                            std::size_t block) {
  const auto B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads;
  auto qkv = linear(c_attn, x).split(C, 2);
  auto q = qkv[0].view({B, T, heads, hd}).transpose(1, 2);  // [B, heads, T, hd]
  auto k = qkv[1].view({B, T, heads, hd}).transpose(1, 2);
  auto v = qkv[2].view({B, T, heads, hd}).transpose(1, 2);
  bool causal = true;
  if (cache) {
    auto& [keys, values] = cache->blocks_[block];
    if (!keys.defined() || keys.size(0) != B || keys.scalar_type() != k.scalar_type()) {
      keys = at::empty({B, heads, context, hd}, k.options());
      values = at::empty({B, heads, context, hd}, v.options());
    }
    const auto start = cache->length_;
    keys.narrow(2, start, T).copy_(k);
    values.narrow(2, start, T).copy_(v);
    if (start > 0) {
      // One query after the cached positions: it sees every key, so no mask.
      k = keys.narrow(2, 0, start + T);
      v = values.narrow(2, 0, start + T);
      causal = false;
    }
  }
  // wick's kernel on the CPU for these shapes (no copy of the heads, which stay views of the
  // projection), LibTorch's flash attention elsewhere.
  auto y = wick::scaled_dot_product_attention(q, k, v, is_training() ? dropout : 0.0, causal);
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  return at::dropout(linear(c_proj, y), dropout, is_training());
}

MlpImpl::MlpImpl(const GptShape& s) : dropout(s.dropout) {
  c_fc = register_module("c_fc", nn::Linear(s.width, 4 * s.width));
  c_proj = register_module("c_proj", nn::Linear(4 * s.width, s.width));
}

at::Tensor MlpImpl::forward(const at::Tensor& x) {
  // GPT-2's GELU is the tanh approximation: wick's kernel on the CPU; on a GPU in bf16, in
  // the first product's epilogue.
  const auto h = wick::gelu_mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias);
  return at::dropout(h, dropout, is_training());
}

BlockImpl::BlockImpl(const GptShape& s) {
  ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({s.width})));
  attn = register_module("attn", CausalSelfAttention(s));
  ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({s.width})));
  mlp = register_module("mlp", Mlp(s));
}

std::pair<at::Tensor, at::Tensor> BlockImpl::forward(const at::Tensor& x, const at::Tensor& pending,
                                                     KvCache* cache, std::size_t block) {
  auto [s, h] = add_norm(ln_1, x, pending);
  auto [s2, h2] = add_norm(ln_2, s, attn(h, cache, block));
  return {s2, mlp(h2)};
}

GptImpl::GptImpl(const GptShape& s) : context(s.context), dropout(s.dropout) {
  wte = register_module("wte", nn::Embedding(s.vocab, s.width));
  wpe = register_module("wpe", nn::Embedding(s.context, s.width));
  auto list = register_module("blocks", nn::ModuleList());
  for (std::int64_t i = 0; i < s.layers; ++i) {
    blocks.push_back(Block(s));
    list->push_back(blocks.back());  // registered as blocks.<i>
  }
  ln_f = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({s.width})));
  init_weights(s.layers);
}

at::Tensor GptImpl::hidden(const at::Tensor& tokens, std::int64_t start, KvCache* cache) {
  const auto T = tokens.size(1);
  TORCH_CHECK(start + T <= context, "gpt: a sequence of ", start + T,
              " tokens is longer than the context (", context, ")");
  const auto pos =
      at::arange(start, start + T, at::TensorOptions().dtype(at::kLong).device(tokens.device()));
  auto x = at::dropout(wte(tokens) + wpe(pos), dropout, is_training());
  at::Tensor pending;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    std::tie(x, pending) = blocks[i](x, pending, cache, i);
  return add_norm(ln_f, x, pending).second;
}

at::Tensor GptImpl::forward(const at::Tensor& tokens) {
  // Tied: the output layer is the token embedding.
  return wick::linear(hidden(tokens, 0, nullptr), wte->weight);
}

at::Tensor GptImpl::decode(const at::Tensor& tokens, KvCache& cache) {
  const auto start = cache.length();
  TORCH_CHECK(start == 0 || tokens.size(1) == 1,
              "gpt: decode takes a prompt on an empty cache, then one token a call (", start,
              " cached, ", tokens.size(1), " given)");
  cache.blocks_.resize(blocks.size());
  // Only the last position's logits: a GPT-2 prompt's whole [T, 50304] is not needed.
  const auto h = hidden(tokens, start, &cache).select(1, -1);
  cache.length_ = start + tokens.size(1);
  return wick::linear(h, wte->weight);
}

// GPT-2's: N(0, 0.02) for linear and embedding weights, zero biases, unit LayerNorms, and
// the residual projections (both c_proj) scaled down by sqrt(2 * layers) so that the
// residual stream's variance does not grow with depth. From the global generator, which
// wick seeds before it asks for the model: the same seed gives the same weights.
void GptImpl::init_weights(std::int64_t layers) {
  torch::NoGradGuard no_grad;
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* l = m->as<nn::Linear>()) {
      nn::init::normal_(l->weight, 0.0, 0.02);
      if (l->bias.defined()) nn::init::zeros_(l->bias);
    } else if (auto* e = m->as<nn::Embedding>()) {
      nn::init::normal_(e->weight, 0.0, 0.02);
    } else if (auto* n = m->as<nn::LayerNorm>()) {
      nn::init::ones_(n->weight);
      nn::init::zeros_(n->bias);
    }
  }
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
  for (auto& b : blocks) {
    nn::init::normal_(b->attn->c_proj->weight, 0.0, proj_std);
    nn::init::normal_(b->mlp->c_proj->weight, 0.0, proj_std);
  }
}

}  // namespace wick_gpt
