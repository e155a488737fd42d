// The learning-rate finder: an exponential ramp of the learning rate over training batches on a
// throwaway copy of the run, the loss smoothed, stopped when it diverges.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "loop/build_trainer.hpp"
#include "tune/probe.hpp"
#include "wick/hook.hpp"
#include "wick/task.hpp"
#include "wick/tuning.hpp"

namespace wick {

double lr_ramp(const LrFindOptions& o, std::int64_t i) {
  const double t = o.steps > 1 ? static_cast<double>(i) / static_cast<double>(o.steps - 1) : 0.0;
  return o.start * std::pow(o.end / o.start, t);
}

namespace {

// An exponential moving average, bias-corrected so that the first values are not pulled
// towards 0.
struct Smoother {
  double beta, avg = 0, weight = 1;
  double add(double x) {
    avg = beta * avg + (1 - beta) * x;
    weight *= beta;
    return avg / (1 - weight);
  }
};

}  // namespace

std::int64_t steepest_descent(const std::vector<LrFindPoint>& points) {
  const auto n = static_cast<std::int64_t>(points.size());
  if (n < 3) return -1;
  std::int64_t lowest = 0;
  for (std::int64_t i = 1; i < n; ++i)
    if (points[i].smoothed < points[lowest].smoothed) lowest = i;
  // The first tenth is the average still settling; past the minimum the loss only rises.
  const std::int64_t from = std::max<std::int64_t>(1, n / 10);
  const std::int64_t to = std::min(lowest, n - 2);
  std::int64_t best = -1;
  double best_slope = 0;
  for (std::int64_t i = from; i <= to; ++i) {
    const double dx = std::log(points[i + 1].lr) - std::log(points[i - 1].lr);
    if (!(dx > 0)) continue;
    const double slope = (points[i + 1].smoothed - points[i - 1].smoothed) / dx;
    if (slope < best_slope) {
      best_slope = slope;
      best = i;
    }
  }
  return best;
}

void check_lr_find_options(const LrFindOptions& o) {
  auto bad = [](const std::string& what) { throw ConfigError(what); };
  if (!(o.start > 0) || !std::isfinite(o.start))
    bad("--start must be a learning rate > 0, e.g. --start 1e-7");
  if (!std::isfinite(o.end)) bad("--end must be a finite learning rate, e.g. --end 10");
  if (!(o.end > o.start)) {
    char start[32];
    std::snprintf(start, sizeof start, "%g", o.start);
    bad(std::string("--end must be larger than --start (") + start + "), e.g. --end 10");
  }
  if (o.steps < 10) bad("--steps must be at least 10: the smoothed loss needs batches to settle");
  if (!(o.smoothing >= 0 && o.smoothing < 1)) bad("the smoothing must be in [0, 1)");
  if (!(o.diverge > 1)) bad("the divergence factor must be > 1");
}

namespace {

// Sets each batch's learning rate and records its loss; ends the fit at the last step or when
// the smoothed loss diverges.
class LrRamp : public Hook {
 public:
  LrRamp(const LrFindOptions& o, LrFindResult& r) : o_(o), r_(r), smoother_{o.smoothing} {}

  void connect(Registrar& reg) override {
    reg.on(Point::before_fit, [this](Context& c) {
      // Groups keep their ratio to their optimizer's first group (a backbone at 0.1x stays so).
      for (const auto& name : c.optimizer_names()) {
        auto& groups = c.optimizer(name).param_groups();
        std::vector<double> ratio;
        const double first = groups.front().options().get_lr();
        for (auto& g : groups) ratio.push_back(first > 0 ? g.options().get_lr() / first : 1.0);
        ratios_.push_back(std::move(ratio));
      }
    });
    reg.on(Point::before_step, [this](Context& c) {
      lr_ = lr_ramp(o_, step_);
      const auto names = c.optimizer_names();
      for (std::size_t k = 0; k < names.size(); ++k) {
        auto& groups = c.optimizer(names[k]).param_groups();
        for (std::size_t g = 0; g < groups.size(); ++g)
          groups[g].options().set_lr(lr_ * ratios_[k][g]);
      }
      loss_ = std::nan("");
    });
    reg.on(Point::after_loss, [this](Context& c) {
      const auto& loss = c.output().loss;
      if (!loss.defined())
        throw ConfigError(
            "wick lr-find needs the task's loss (Output::loss); this task leaves it empty");
      loss_ = loss.detach().to(torch::kCPU).item<double>();
    });
    reg.on(Point::after_step, [this](Context&) {
      const double smoothed = smoother_.add(loss_);
      r_.points.push_back({step_, lr_, loss_, smoothed});
      if (step_ == 0 || smoothed < best_) best_ = smoothed;
      ++step_;
      if (!std::isfinite(smoothed) || (step_ > 1 && smoothed > o_.diverge * best_)) {
        r_.diverged = true;
        throw CancelFit{};
      }
      if (step_ >= o_.steps) throw CancelFit{};
    });
  }

 private:
  const LrFindOptions& o_;
  LrFindResult& r_;
  std::vector<std::vector<double>> ratios_;
  std::int64_t step_ = 0;
  Smoother smoother_;
  double lr_ = 0, loss_ = 0, best_ = 0;
};

}  // namespace

LrFindResult find_lr(const Config& cfg, const PluginFinder& finder, const LrFindOptions& o) {
  check_lr_find_options(o);
  LrFindResult r;
  auto opts = cfg.trainer();
  if (opts.auto_batch_size) choose_auto_batch_size(cfg, finder, RunInfo{}, opts, true);
  auto probe = run_probe(cfg, finder, std::move(opts), std::make_shared<LrRamp>(o, r), "lr-find");
  r.left_out = std::move(probe.left_out);
  if (probe.result.status == FitResult::Status::failed)
    throw std::runtime_error("the learning-rate ramp failed: " + probe.result.error);
  if (r.points.empty()) throw std::runtime_error("the learning-rate ramp ran no batch");
  std::int64_t lowest = 0;
  for (std::size_t i = 1; i < r.points.size(); ++i)
    if (r.points[i].smoothed < r.points[lowest].smoothed) lowest = static_cast<std::int64_t>(i);
  r.min_loss = r.points[lowest].smoothed;
  r.min_loss_lr = r.points[lowest].lr;
  r.suggestion_step = steepest_descent(r.points);
  if (r.suggestion_step >= 0) r.suggestion = r.points[r.suggestion_step].lr;
  return r;
}

}  // namespace wick
