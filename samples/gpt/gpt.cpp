// A GPT-2-style decoder-only transformer trained on a token file: the language-modelling task
// in C++ modules (no TorchScript). Shapes, operations and initialisation follow GPT-2 / nanoGPT,
// as the PyTorch twin bench/peers/gpt2.py does; the names are nanoGPT's without its
// `transformer.` prefix and with `blocks` for its `h`:
//   wte [vocab, width], wpe [context, width], blocks.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2,
//   mlp.c_fc, mlp.c_proj}, ln_f; logits = x wte^T (tied embeddings, no lm_head parameter).
#include <wick/activations.hpp>
#include <wick/attention.hpp>
#include <wick/linear.hpp>
#include <wick/losses.hpp>
#include <wick/normalization.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "token_file.hpp"

namespace {

namespace nn = torch::nn;

// x W^T + b as PyTorch's nn.Linear computes it, the bias in the matrix product's epilogue
// (nn::Linear's forward, the C++ frontend's F::linear, multiplies a 3-D input and then adds
// the bias in a separate broadcast add, which under bf16 autocast runs in float against a float
// bias: on an H100, 48 such adds were 6 of a GPT-2 step's 60 ms). wick::linear: on a GPU in
// bf16 the weight's and bias's gradients come out of the products in float, not cast after.
at::Tensor linear(const nn::Linear& l, const at::Tensor& x) {
  return wick::linear(x, l->weight, l->bias);
}

struct GptShape {
  std::int64_t vocab, context, layers, heads, width;
  double dropout;
};

// Causal self-attention: one projection to q, k, v, heads split from the width.
struct CausalSelfAttentionImpl : nn::Module {
  explicit CausalSelfAttentionImpl(const GptShape& s) : heads(s.heads), dropout(s.dropout) {
    c_attn = register_module("c_attn", nn::Linear(s.width, 3 * s.width));
    c_proj = register_module("c_proj", nn::Linear(s.width, s.width));
  }

  at::Tensor forward(const at::Tensor& x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads;
    auto qkv = linear(c_attn, x).split(C, 2);
    auto q = qkv[0].view({B, T, heads, hd}).transpose(1, 2);  // [B, heads, T, hd]
    auto k = qkv[1].view({B, T, heads, hd}).transpose(1, 2);
    auto v = qkv[2].view({B, T, heads, hd}).transpose(1, 2);
    // wick's kernel on the CPU for these shapes (no copy of the heads, which stay views of the
    // projection), LibTorch's flash attention elsewhere.
    auto y = wick::scaled_dot_product_attention(q, k, v, is_training() ? dropout : 0.0,
                                                /*is_causal=*/true);
    y = y.transpose(1, 2).contiguous().view({B, T, C});
    return torch::dropout(linear(c_proj, y), dropout, is_training());
  }

  std::int64_t heads;
  double dropout;
  nn::Linear c_attn{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

struct MlpImpl : nn::Module {
  explicit MlpImpl(const GptShape& s) : dropout(s.dropout) {
    c_fc = register_module("c_fc", nn::Linear(s.width, 4 * s.width));
    c_proj = register_module("c_proj", nn::Linear(4 * s.width, s.width));
  }
  at::Tensor forward(const at::Tensor& x) {
    // GPT-2's GELU is the tanh approximation: wick's kernel on the CPU; on a GPU in bf16, in
    // the products' epilogues.
    const auto h = wick::gelu_mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias);
    return torch::dropout(h, dropout, is_training());
  }
  double dropout;
  nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(Mlp);

// ln(x), or ln(x + branch) beside x + branch: wick's kernels, one pass each way, where
// nn::LayerNorm would be a residual add, a normalisation and, under bf16 autocast, a cast for
// the matrix product that follows.
std::pair<at::Tensor, at::Tensor> add_norm(const nn::LayerNorm& ln, const at::Tensor& x,
                                           const at::Tensor& branch) {
  const double eps = ln->options.eps();
  if (!branch.defined()) return {x, wick::layer_norm(x, ln->weight, ln->bias, eps)};
  return wick::add_layer_norm(x, branch, ln->weight, ln->bias, eps);
}

// Pre-norm residual block: x + attn(ln_1(x)), then + mlp(ln_2(x)). Each residual add is done by
// the normalisation after it, so the block takes the previous block's MLP output (`pending`,
// undefined for the first) and returns the stream without its own.
struct BlockImpl : nn::Module {
  explicit BlockImpl(const GptShape& s) {
    ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({s.width})));
    attn = register_module("attn", CausalSelfAttention(s));
    ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({s.width})));
    mlp = register_module("mlp", Mlp(s));
  }
  // {stream, pending} -> {stream, this block's pending MLP output}.
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& pending) {
    auto [s, h] = add_norm(ln_1, x, pending);
    auto [s2, h2] = add_norm(ln_2, s, attn(h));
    return {s2, mlp(h2)};
  }
  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : nn::Module {
  explicit GptImpl(const GptShape& s) : context(s.context), dropout(s.dropout) {
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

  // tokens [B, T] int64 -> logits [B, T, vocab].
  at::Tensor forward(const at::Tensor& tokens) {
    const auto T = tokens.size(1);
    TORCH_CHECK(T <= context, "gpt: a sequence of ", T, " tokens is longer than the context (",
                context, ")");
    const auto pos =
        torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
    auto x = torch::dropout(wte(tokens) + wpe(pos), dropout, is_training());
    at::Tensor pending;
    for (auto& b : blocks) std::tie(x, pending) = b(x, pending);
    // Tied: the output layer is the token embedding.
    return wick::linear(add_norm(ln_f, x, pending).second, wte->weight);
  }

  // GPT-2's: N(0, 0.02) for linear and embedding weights, zero biases, unit LayerNorms, and
  // the residual projections (both c_proj) scaled down by sqrt(2 * layers) so that the
  // residual stream's variance does not grow with depth. From the global generator, which
  // wick seeds before it asks for the model: the same seed gives the same weights.
  void init_weights(std::int64_t layers) {
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

  std::int64_t context;
  double dropout;
  nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Block> blocks;
  nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt);

// A token file named by a [task] key; what is wrong with it is reported at that key.
std::shared_ptr<const wick_gpt::TokenFile> open_tokens(const wick::Params& p, const char* key,
                                                       std::int64_t context) {
  if (p.get_string(key).empty())
    throw p.error(key, "is empty; give the path of a token file (samples/gpt/tokenize.py)");
  try {
    return std::make_shared<const wick_gpt::TokenFile>(p.get_path(key), context + 1);
  } catch (const std::runtime_error& e) {
    throw p.error(key, std::string("names a token file that cannot be used: ") + e.what());
  }
}

class GptTask : public wick::Task {
 public:
  explicit GptTask(const wick::Params& p)
      : shape_{p.get_int("vocab"), p.get_int("context"), p.get_int("layers"),
               p.get_int("heads"), p.get_int("width"),   p.get_float("dropout")} {
    if (shape_.vocab < 1) throw p.error("vocab", "must be >= 1");
    if (shape_.context < 1) throw p.error("context", "must be >= 1 (tokens per window)");
    if (shape_.layers < 1) throw p.error("layers", "must be >= 1");
    if (shape_.width < 1) throw p.error("width", "must be >= 1");
    if (shape_.heads < 1 || shape_.width % shape_.heads != 0)
      throw p.error("heads", "must be >= 1 and divide width (" + std::to_string(shape_.width) +
                                 ") evenly, e.g. width 768 with 12 heads");
    if (!(shape_.dropout >= 0 && shape_.dropout < 1)) throw p.error("dropout", "must be in [0, 1)");
    const auto valid_batches = p.get_int("valid_batches");
    if (valid_batches < 1) throw p.error("valid_batches", "must be >= 1");
    train_ = open_tokens(p, "data", shape_.context);
    if (!p.get_string("valid_data").empty()) {
      valid_ = open_tokens(p, "valid_data", shape_.context);
      // valid_batches whole batches: the loader cuts the windows at the validation batch size.
      valid_windows_ = valid_batches * p.run().valid_batch_size;
    }
  }

  std::shared_ptr<torch::nn::Module> model() override {
    net_ = Gpt(shape_);
    return net_.ptr();
  }
  std::shared_ptr<wick::Dataset> train_data() override {
    return std::make_shared<wick_gpt::RandomWindows>(train_, shape_.context, shape_.vocab);
  }
  std::shared_ptr<wick::Dataset> valid_data() override {
    if (!valid_) return nullptr;
    return std::make_shared<wick_gpt::FixedWindows>(valid_, shape_.context, shape_.vocab,
                                                    valid_windows_);
  }
  wick::OptimizerDefaults default_optimizer() const override { return {"adamw", 6e-4}; }

  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->forward(b.input);
  }
  // Next-token cross entropy over every position of every window, on bf16 logits
  // (mixed_precision float_prediction = false) as PyTorch's autocast treats cross_entropy: in
  // float inside the kernels. wick::cross_entropy fuses it on a GPU: with LibTorch's
  // log-softmax and NLL (a float log-softmax even copies the bf16 logits to float first),
  // the loss was 9 ms of a 60 ms GPT-2 step on an H100.
  wick::Output loss(wick::Context&, const at::Tensor& logits, const wick::Batch& b) override {
    return {logits, wick::cross_entropy(logits, b.target), {}};
  }

 private:
  GptShape shape_;
  std::shared_ptr<const wick_gpt::TokenFile> train_, valid_;
  std::int64_t valid_windows_ = 0;
  Gpt net_{nullptr};
};

}  // namespace

WICK_PLUGIN(GptTask,
            wick::PluginDef("gpt", "1.0.0",
                            "GPT-2-style decoder language model on uint16 token files "
                            "(nanoGPT's .bin layout)")
                .param_required("data", wick::ParamType::string,
                                "training token file: little-endian uint16 ids "
                                "(samples/gpt/tokenize.py), relative to the config's folder")
                .param_string("valid_data", "",
                              "validation token file, as data (\"\": no validation)")
                .param_int("valid_batches", 20,
                           "validation batches of trainer.valid_batch_size windows, at fixed "
                           "starts spread over valid_data")
                .param_int("context", 1024, "tokens per window (the position embedding's rows)")
                .param_int("layers", 12, "transformer blocks")
                .param_int("heads", 12, "attention heads; must divide width")
                .param_int("width", 768, "embedding width")
                .param_int("vocab", 50304,
                           "vocabulary size (every token must be below it; 50304 is GPT-2's "
                           "50257 rounded up to a multiple of 64)")
                .param_float("dropout", 0.0, "dropout after embeddings, attention and MLP"))
