// Test-only task that is named `gpt` but is not the GPT sample's: the sample's shape keys
// over a model of other parameters (an embedding and a linear head), in a folder of its own
// (build/tests/foreign_gpt/wick_gpt.so), for wick_gpt_generate's refusal of it.
#include <cstdint>

#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace {

class ForeignGpt : public wick::Task {
 public:
  explicit ForeignGpt(const wick::Params& p)
      : vocab_(p.get_int("vocab")), context_(p.get_int("context")), width_(p.get_int("width")) {
    auto tokens = torch::randint(0, vocab_, {64, context_}, torch::kLong);
    data_ = std::make_shared<wick::TensorDataset>(tokens, tokens);
  }
  std::shared_ptr<torch::nn::Module> model() override {
    auto root = std::make_shared<torch::nn::Module>();
    embed_ = root->register_module("embed", torch::nn::Embedding(vocab_, width_));
    head_ = root->register_module("head", torch::nn::Linear(width_, vocab_));
    return root;
  }
  std::shared_ptr<wick::Dataset> train_data() override { return data_; }
  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return head_->forward(embed_->forward(b.input));
  }
  wick::Output loss(wick::Context&, const at::Tensor& pred, const wick::Batch& b) override {
    wick::Output o;
    o.loss = torch::nn::functional::cross_entropy(pred.flatten(0, 1), b.target.flatten());
    return o;
  }

 private:
  std::int64_t vocab_, context_, width_;
  std::shared_ptr<wick::TensorDataset> data_;
  torch::nn::Embedding embed_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

WICK_PLUGIN(ForeignGpt, wick::PluginDef("gpt", "1.0.0", "Test: a task named gpt, not the sample's")
                            .param_int("vocab", 256, "token ids")
                            .param_int("context", 16, "tokens per window")
                            .param_int("layers", 1, "unused")
                            .param_int("heads", 1, "unused")
                            .param_int("width", 8, "embedding width")
                            .param_float("dropout", 0.0, "unused"))
