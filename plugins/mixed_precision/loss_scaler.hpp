// Dynamic loss scaling for fp16 training, with ordinary tensor ops (LibTorch 1.13 has no CPU
// kernels for _amp_foreach_non_finite_check_and_unscale_ or _amp_update_scale_). Kept apart
// from the hook so that tests can drive it directly.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace wick::amp {

class LossScaler {
 public:
  LossScaler(double init_scale, double growth_factor, double backoff_factor,
             std::int64_t growth_interval)
      : scale_(init_scale),
        growth_factor_(growth_factor),
        backoff_factor_(backoff_factor),
        growth_interval_(growth_interval) {}

  double scale() const { return scale_; }
  std::int64_t growth_tracker() const { return tracker_; }
  void restore(double scale, std::int64_t tracker) {
    scale_ = scale;
    tracker_ = tracker;
  }

  at::Tensor scale_loss(const at::Tensor& loss) const { return loss * scale_; }

  // Divides the gradients by the scale in place. Returns a 0-dim bool tensor on the
  // gradients' device, true when any gradient holds an inf or a NaN (no sync here).
  // The check is one float64 sum per gradient: it is finite exactly when every element is
  // (no float32 values can overflow it), and costs a third of isfinite + any.
  at::Tensor unscale_(const std::vector<at::Tensor>& grads) const {
    torch::NoGradGuard no_grad;
    if (grads.empty()) return torch::zeros({}, torch::kBool);
    const double inv = 1.0 / scale_;
    std::vector<at::Tensor> sums;
    sums.reserve(grads.size());
    for (const auto& g : grads) {
      auto gd = g.detach();
      gd.mul_(inv);
      sums.push_back(gd.sum(torch::kDouble));
    }
    return torch::logical_not(torch::isfinite(torch::stack(sums).sum()));
  }

  // After each step decision: on a non-finite gradient back off and restart the count;
  // otherwise grow the scale after growth_interval finite steps in a row.
  void update(bool found_inf) {
    if (found_inf) {
      scale_ *= backoff_factor_;
      tracker_ = 0;
      return;
    }
    if (++tracker_ >= growth_interval_) {
      scale_ *= growth_factor_;
      tracker_ = 0;
    }
  }

 private:
  double scale_;
  double growth_factor_, backoff_factor_;
  std::int64_t growth_interval_;
  std::int64_t tracker_ = 0;
};

}  // namespace wick::amp
