// The GPT sample's model: a GPT-2-style decoder-only transformer in LibTorch's C++ modules,
// shared by the task plugin (gpt.cpp), which trains it, and wick_gpt_generate (generate.cpp),
// which decodes with it a token at a time from cached keys and values. Shapes, operations and
// initialisation follow GPT-2 / nanoGPT, as the PyTorch twin bench/peers/gpt2.py does; the
// names are nanoGPT's without its `transformer.` prefix and with `blocks` for its `h`:
//   wte [vocab, width], wpe [context, width], blocks.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2,
//   mlp.c_fc, mlp.c_proj}, ln_f; logits = x wte^T (tied embeddings, no lm_head parameter).
#pragma once

#include <wick/params.hpp>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

// A named namespace, not an anonymous one: wick's unity build may compile this file's source
// and gpt.cpp as one translation unit.
namespace wick_gpt {

struct GptShape {
  std::int64_t vocab, context, layers, heads, width;
  double dropout;
};

// The shape from the gpt task's [task] keys (declared with the plugin in gpt.cpp), each checked
// and refused by name.
GptShape read_shape(const wick::Params& p);

// The keys and values of the positions decoded so far, one pair per block, [batch, heads,
// context, width / heads] each, filled up to length().
class KvCache {
 public:
  std::int64_t length() const { return length_; }
  void clear() { length_ = 0; }

 private:
  friend struct CausalSelfAttentionImpl;
  friend struct GptImpl;
  std::vector<std::pair<at::Tensor, at::Tensor>> blocks_;
  std::int64_t length_ = 0;
};

// Causal self-attention: one projection to q, k, v, heads split from the width.
struct CausalSelfAttentionImpl : torch::nn::Module {
  explicit CausalSelfAttentionImpl(const GptShape& s);
  // x [B, T, width]; with a cache, x is at positions cache.length() on, and its keys and values
  // go into the cache's entry `block`.
  at::Tensor forward(const at::Tensor& x, KvCache* cache = nullptr, std::size_t block = 0);

  std::int64_t heads, context;
  double dropout;
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const GptShape& s);
  at::Tensor forward(const at::Tensor& x);

  double dropout;
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Mlp);

// Pre-norm residual block: x + attn(ln_1(x)), then + mlp(ln_2(x)). Each residual add is done by
// the normalisation after it, so the block takes the previous block's MLP output (`pending`,
// undefined for the first) and returns the stream without its own.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptShape& s);
  // {stream, pending} -> {stream, this block's pending MLP output}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& pending,
                                            KvCache* cache = nullptr, std::size_t block = 0);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptShape& s);

  // tokens [B, T] int64 -> logits [B, T, vocab].
  at::Tensor forward(const at::Tensor& tokens);
  // Generation: tokens [B, T] at positions cache.length() to cache.length() + T - 1 -> the
  // logits after the last of them, [B, vocab]; their keys and values join the cache. A
  // prompt of T tokens goes on an empty cache, then one token a call; the positions end at
  // the context (clear the cache and start again from a shorter text).
  at::Tensor decode(const at::Tensor& tokens, KvCache& cache);

  std::int64_t context;
  double dropout;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  // The stream after ln_f, [B, T, width], for tokens from position `start`.
  at::Tensor hidden(const at::Tensor& tokens, std::int64_t start, KvCache* cache);
  void init_weights(std::int64_t layers);
};
TORCH_MODULE(Gpt);

}  // namespace wick_gpt
