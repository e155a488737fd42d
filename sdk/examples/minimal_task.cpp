// minimal_task: fits y = 3x - 1 with a one-weight linear model, on data made in memory.
// Build: find_package(wick) and wick_add_plugin(minimal_task SOURCES minimal_task.cpp).
// Run: [task] plugin = "minimal_task" in the run's TOML file.
#include <cstdint>

#include <wick/task.hpp>
#include <wick/wick.hpp>

namespace {

class MinimalTask : public wick::Task {
 public:
  // p holds the validated table: unknown keys and wrong types never reach this point.
  explicit MinimalTask(const wick::Params& p) : samples_(p.get_int("samples")) {
    if (samples_ < 4) throw p.error("samples", "must be >= 4");
    // Its own generator: the data stay the same whatever the run's seed (which sets the
    // model's initialisation and the batch order).
    auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
    auto make = [&](std::int64_t n) {
      auto x = torch::rand({n, 1}, gen) * 2 - 1;
      auto y = 3 * x - 1 + 0.1 * torch::randn({n, 1}, gen);
      return std::make_shared<wick::TensorDataset>(x, y);
    };
    train_ = make(samples_);
    valid_ = make(samples_ / 4);
  }

  // The trainer moves the model to the run's device, switches train/eval and checkpoints it.
  std::shared_ptr<torch::nn::Module> model() override {
    net_ = torch::nn::Linear(1, 1);
    return net_.ptr();
  }
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return valid_; }

  // The batch is already on the model's device.
  at::Tensor forward(wick::Context&, const wick::Batch& batch) override {
    return net_->forward(batch.input);
  }
  // Logged as train/loss and valid/loss; each metric as train/NAME and valid/NAME.
  wick::Output loss(wick::Context&, const at::Tensor& pred, const wick::Batch& batch) override {
    wick::Output out;
    out.loss = torch::mse_loss(pred, batch.target);
    out.metrics.emplace_back("abs_error", (pred - batch.target).abs().mean());
    return out;
  }
  wick::OptimizerDefaults default_optimizer() const override { return {"adam", 0.05}; }

 private:
  std::int64_t samples_;
  std::shared_ptr<wick::TensorDataset> train_, valid_;
  torch::nn::Linear net_{nullptr};
};

}  // namespace

WICK_PLUGIN(MinimalTask, wick::PluginDef("minimal_task", "0.1.0",
                                         "Fits y = 3x - 1 with a linear model (a task template)")
                             .param_int("samples", 512, "training samples (validation: a quarter)"))
