// Loader threads: samples/s of a fit whose per-sample data costs 1 ms to "decode" (a sleep:
// the time a JPEG decode or a disk read takes, without competing for the shared machine's
// cores), with trainer.num_workers = 2 against 0, on the reference MLP (784-256-128-10).
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "common.hpp"
#include "wick/task.hpp"
#include "wick/torch_data.hpp"
#include "wick/trainer.hpp"

namespace wick::bench {

namespace {

struct SlowImages : torch::data::datasets::Dataset<SlowImages> {
  at::Tensor x, y;
  torch::data::Example<> get(std::size_t i) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return {x[static_cast<std::int64_t>(i)], y[static_cast<std::int64_t>(i)]};
  }
  torch::optional<std::size_t> size() const override { return static_cast<std::size_t>(x.size(0)); }
};

class SlowTask : public ClassificationTask {
 public:
  explicit SlowTask(std::int64_t n) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    SlowImages d;
    d.x = torch::rand({n, 784}, gen);
    d.y = torch::randint(0, 10, {n}, gen, torch::kLong);
    data_ = from_torch_dataset(std::move(d));
  }
  std::shared_ptr<torch::nn::Module> model() override {
    net_ = torch::nn::Sequential(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                                 torch::nn::Linear(256, 128), torch::nn::ReLU(),
                                 torch::nn::Linear(128, 10));
    return net_.ptr();
  }
  std::shared_ptr<Dataset> train_data() override { return data_; }
  at::Tensor forward(Context&, const Batch& b) override { return net_->forward(b.input); }

 private:
  std::shared_ptr<Dataset> data_;
  torch::nn::Sequential net_{nullptr};
};

double samples_per_s(std::int64_t n, std::int64_t workers) {
  TrainerOptions o;
  o.batch_size = 64;
  o.log_every = 0;
  o.num_workers = workers;
  o.write_outputs = false;
  Trainer t(o, std::make_shared<SlowTask>(n));
  const auto t0 = Clock::now();
  auto res = t.fit();
  if (res.status != FitResult::Status::completed)
    throw std::runtime_error("loader benchmark fit failed: " + res.error);
  return static_cast<double>(n) / seconds_since(t0);
}

}  // namespace

json run_loader(Settings& s) {
  // 1536 samples: ~1.6 s at 0 workers; alternated rounds keep the row under ~15 s.
  const std::int64_t n = s.smoke ? 128 : 1536;
  const int rounds = s.smoke ? 1 : 4;
  std::vector<double> zero, two, ratio;
  for (int r = 0; r < rounds; ++r) {
    const bool two_first = r % 2 == 1;
    double a = 0, b = 0;
    if (two_first) b = samples_per_s(n, 2);
    a = samples_per_s(n, 0);
    if (!two_first) b = samples_per_s(n, 2);
    zero.push_back(a);
    two.push_back(b);
    ratio.push_back(b / a);
  }
  return {{"samples", n},
          {"rounds", rounds},
          {"decode_ms_per_sample", 1},
          {"workers_0_samples_per_s", make_stats(zero).to_json()},
          {"workers_2_samples_per_s", make_stats(two).to_json()},
          {"ratio", make_stats(ratio).to_json()}};
}

}  // namespace wick::bench
