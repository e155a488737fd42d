// The GPT sample's task plugin (`gpt`): the language-modelling task of the GPT-2-style decoder
// in gpt_model.hpp, trained on token files in nanoGPT's layout (token_file.hpp).
#include <wick/losses.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpt_model.hpp"
#include "token_file.hpp"

namespace {

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
  explicit GptTask(const wick::Params& p) : shape_(wick_gpt::read_shape(p)) {
    const auto valid_batches = p.get_int("valid_batches");
    if (valid_batches < 1) throw p.error("valid_batches", "must be >= 1");
    train_ = open_tokens(p, "data", shape_.context);
    if (!p.get_string("valid_data").empty()) {
      valid_ = open_tokens(p, "valid_data", shape_.context);
      // valid_batches whole batches: the loader cuts the windows at the validation batch size.
      const std::int64_t per_batch = p.run().valid_batch_size, most = std::int64_t{1} << 31;
      if (valid_batches > most / per_batch)
        throw p.error("valid_batches", "times trainer.valid_batch_size (" +
                                           std::to_string(per_batch) + ") must be at most " +
                                           std::to_string(most) + " windows");
      valid_windows_ = valid_batches * per_batch;
    }
  }

  std::shared_ptr<torch::nn::Module> model() override {
    net_ = wick_gpt::Gpt(shape_);
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

  // The training file's size and fingerprint: a resume on another file goes on (more data is
  // a reason to), but it draws other windows than the interrupted run would have, so it says so.
  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override {
    out.set_int("data_tokens", train_->size());
    out.set_int("data_fingerprint", train_->fingerprint());
  }
  void load_state(const wick::StateDict& in) override {
    const auto tokens = in.get_int("data_tokens");
    const auto fingerprint = in.get_int("data_fingerprint");
    if (tokens == train_->size() && fingerprint == train_->fingerprint()) return;
    std::fprintf(stderr,
                 "wick: warning: task.data (%s) is not the token file the checkpoint's run "
                 "trained on (%s): the resumed run draws other windows than the interrupted one "
                 "would have\n",
                 train_->path().c_str(),
                 tokens != train_->size() ? (std::to_string(tokens) + " tokens then, " +
                                             std::to_string(train_->size()) + " now")
                                                .c_str()
                                          : "its contents differ");
  }

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
  wick_gpt::GptShape shape_;
  std::shared_ptr<const wick_gpt::TokenFile> train_, valid_;
  std::int64_t valid_windows_ = 0;
  wick_gpt::Gpt net_{nullptr};
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
