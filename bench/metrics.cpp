// Metric plugins' cost: accuracy + f1 + confusion_matrix updates per validation batch of the
// reference MLP (784-256-128-10, batch 256), as a share of that batch's eval step (forward and
// cross-entropy loss without gradients), one thread. The metrics are built from a config as
// `wick fit` builds them; the two are timed in alternating rounds and the ratio is each
// round's, so that a busy moment of the shared machine falls on both.
#include <cstdint>

#include <torch/torch.h>

#include "common.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/metric.hpp"
#include "wick/trainer.hpp"

namespace wick::bench {

json run_metrics(Settings& s) {
  const int rounds = s.smoke ? 2 : 7, iters = s.smoke ? 20 : 200;
  const std::int64_t batch = 256;
  at::set_num_threads(1);
  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(784, 256), torch::nn::ReLU(),
                            torch::nn::Linear(256, 128), torch::nn::ReLU(),
                            torch::nn::Linear(128, 10));
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = torch::rand({batch, 784});
  const auto y = torch::randint(0, 10, {batch}, torch::kLong);

  auto cfg = Config::parse(
      "[[metrics]]\nplugin = \"accuracy\"\n[[metrics]]\nplugin = \"f1\"\n"
      "[[metrics]]\nplugin = \"confusion_matrix\"\n",
      s.work_dir + "/metrics_bench.toml", {});
  PluginFinder finder({s.plugin_dir});
  auto metrics = cfg.make_metrics(finder);
  const auto pred = net->forward(x);

  std::vector<double> step_us, update_us, ratio;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      auto out = net->forward(x);
      auto loss = torch::cross_entropy_loss(out, y);  // on the CPU, computed here and now
    }
    const double step = seconds_since(t0) / iters * 1e6;
    for (auto& m : metrics) m.metric->reset();
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
      for (auto& m : metrics) m.metric->update(pred, y);
    const double update = seconds_since(t0) / iters * 1e6;
    step_us.push_back(step);
    update_us.push_back(update);
    ratio.push_back(update / step);
  }
  return {{"batch", batch},
          {"iterations", iters},
          {"rounds", rounds},
          {"eval_step_us", make_stats(step_us).to_json()},
          {"updates_us", make_stats(update_us).to_json()},
          {"share", make_stats(ratio).to_json()}};
}

}  // namespace wick::bench
