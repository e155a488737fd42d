// A host program that uses wick as a library: its own model and data (a Task subclass
// compiled into the program, no task plugin), a Trainer built in C++, and hooks (progress,
// metrics_log, ...) and metrics loaded from a TOML file, as `wick fit` would load them. After
// the fit it uses the trained model: evaluate() and predict() into a .npy file.
//
//   build/bin/wick_embed_sample samples/embed/hooks.toml [--set trainer.epochs=2]...
#include <wick/config.hpp>
#include <wick/loader.hpp>
#include <wick/task.hpp>
#include <wick/tensor_files.hpp>
#include <wick/trainer.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

// The host's own model: a small MLP written as a torch::nn::Module.
struct SpiralNet : torch::nn::Module {
  SpiralNet() {
    fc1 = register_module("fc1", torch::nn::Linear(2, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    out = register_module("out", torch::nn::Linear(64, 2));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(fc1->forward(x));
    x = torch::tanh(fc2->forward(x));
    return out->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, out{nullptr};
};

// Two interleaved spirals (class 0 and 1) with a little noise: not linearly separable.
class SpiralTask : public wick::ClassificationTask {
 public:
  explicit SpiralTask(std::int64_t n) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
    auto make = [&](std::int64_t m) {
      auto t = torch::rand({m}, gen) * 2 * M_PI + 0.5;
      auto y = torch::randint(0, 2, {m}, gen, torch::kLong);
      auto sign = y.to(torch::kFloat) * 2 - 1;
      auto x = torch::stack({sign * t * torch::cos(t), sign * t * torch::sin(t)}, 1) / 10;
      x = x + 0.02 * torch::randn({m, 2}, gen);
      return std::make_shared<wick::TensorDataset>(x, y);
    };
    train_ = make(n);
    valid_ = make(n / 4);
  }
  std::shared_ptr<torch::nn::Module> model() override {
    net_ = std::make_shared<SpiralNet>();
    return net_;
  }
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return valid_; }
  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->forward(b.input);
  }

 private:
  std::shared_ptr<wick::TensorDataset> train_, valid_;
  std::shared_ptr<SpiralNet> net_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: %s HOOKS.toml [--set SECTION.KEY=VALUE]...\n", argv[0]);
    return 2;
  }
  std::vector<std::string> sets;
  for (int i = 2; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--set") == 0) sets.emplace_back(argv[i + 1]);
  try {
    // [trainer], [optimizer] and [[hooks]] come from the file; the task is ours.
    auto cfg = wick::Config::load(argv[1], sets);
    wick::PluginFinder finder(cfg.search_path());
    wick::Trainer trainer(cfg.trainer(), std::make_shared<SpiralTask>(2048), cfg.optimizer());
    for (auto& h : cfg.make_hooks(finder)) trainer.add_hook(std::move(h));
    for (auto& m : cfg.make_metrics(finder)) trainer.add_metric(std::move(m));
    std::fputs(trainer.describe().c_str(), stdout);
    auto res = trainer.fit();
    const auto acc = trainer.context().last_record().get("valid/accuracy");
    std::printf("embed: %s, valid/accuracy %.4f, outputs in %s\n", wick::to_string(res.status),
                acc.value_or(-1.0), trainer.run().output_dir.c_str());
    if (!res.error.empty()) std::fprintf(stderr, "embed: %s\n", res.error.c_str());
    if (res.status != wick::FitResult::Status::completed) return res.exit_code();

    // The trained model: the whole validation set once more (the numbers of the fit's last
    // validation), and its outputs for every sample, in order, for NumPy.
    for (const auto& [k, v] : trainer.evaluate(wick::Split::valid).values)
      std::printf("embed: evaluate %s %.6f\n", k.c_str(), v);
    const auto out = trainer.run().output_dir + "/valid_predictions.npy";
    wick::write_tensor_file(out, trainer.predict(wick::Split::valid));
    std::printf("embed: predictions in %s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed: %s\n", e.what());
    return 2;
  }
}
