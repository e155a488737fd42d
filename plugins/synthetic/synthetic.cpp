// A small classification task on generated data: inputs x ~ N(0, 1), labels the argmax of a
// fixed random linear map of x. Deterministic for a seed; for tests and quick runs.
#include <cstdint>

#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace {

// A hidden layer as one module of the network's Sequential (a Sequential inside a Sequential
// needs a forward of fixed types).
struct BlockImpl : torch::nn::SequentialImpl {
  using torch::nn::SequentialImpl::SequentialImpl;
  at::Tensor forward(at::Tensor x) { return torch::nn::SequentialImpl::forward(x); }
};
TORCH_MODULE(Block);

class Synthetic : public wick::ClassificationTask {
 public:
  explicit Synthetic(const wick::Params& p)
      : samples_(p.get_int("samples")),
        valid_samples_(p.get_int("valid_samples")),
        features_(p.get_int("features")),
        classes_(p.get_int("classes")),
        hidden_(p.get_int_list("hidden")),
        seed_(p.get_int("seed")),
        dropout_(p.get_float("dropout")) {
    if (samples_ < 1) throw p.error("samples", "must be >= 1");
    if (valid_samples_ < 0) throw p.error("valid_samples", "must be >= 0");
    if (features_ < 1) throw p.error("features", "must be >= 1");
    if (classes_ < 2) throw p.error("classes", "must be >= 2");
    for (auto h : hidden_)
      if (h < 1) throw p.error("hidden", "sizes must be >= 1");
    if (dropout_ < 0 || dropout_ >= 1) throw p.error("dropout", "must be in [0, 1)");
    // Data from its own generator, so the model's initialisation (trainer seed) and the data
    // (task seed) vary independently.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(seed_));
    auto w = torch::randn({features_, classes_}, gen);
    auto make = [&](std::int64_t n) {
      auto x = torch::randn({n, features_}, gen);
      auto y = x.matmul(w).argmax(1);
      return std::make_shared<wick::TensorDataset>(x, y);
    };
    train_ = make(samples_);
    if (valid_samples_ > 0) valid_ = make(valid_samples_);
  }

  std::shared_ptr<torch::nn::Module> model() override {
    net_ = torch::nn::Sequential();
    std::int64_t in = features_;
    for (auto h : hidden_) {
      if (dropout_ > 0) {
        // One block per hidden layer: what activation checkpointing segments by name.
        net_->push_back(
            Block(torch::nn::Linear(in, h), torch::nn::ReLU(), torch::nn::Dropout(dropout_)));
      } else {
        net_->push_back(torch::nn::Linear(in, h));
        net_->push_back(torch::nn::ReLU());
      }
      in = h;
    }
    net_->push_back(torch::nn::Linear(in, classes_));
    return net_.ptr();
  }
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return valid_; }

  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->forward(b.input);
  }

 private:
  std::int64_t samples_, valid_samples_, features_, classes_;
  std::vector<std::int64_t> hidden_;
  std::int64_t seed_;
  double dropout_;
  std::shared_ptr<wick::TensorDataset> train_, valid_;
  torch::nn::Sequential net_{nullptr};
};

}  // namespace

WICK_PLUGIN(Synthetic,
            wick::PluginDef("synthetic", "1.0.0",
                            "Classification on generated Gaussian data (for tests and demos)")
                .param_int("samples", 1024, "training samples")
                .param_int("valid_samples", 256, "validation samples (0: no validation)")
                .param_int("features", 16, "input features")
                .param_int("classes", 4, "classes")
                .param_int_list("hidden", {32}, "hidden layer sizes of the MLP")
                .param_int("seed", 0, "seed of the generated data")
                .param_float("dropout", 0.0,
                             "dropout after each hidden layer; > 0 makes each hidden layer a "
                             "block (Linear, ReLU, Dropout) named 0, 1, ..."))
