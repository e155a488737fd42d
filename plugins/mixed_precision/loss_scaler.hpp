// Dynamic loss scaling for fp16 training. On the CPU with ordinary tensor ops (LibTorch 1.13
// has no CPU kernels for _amp_foreach_non_finite_check_and_unscale_); on CUDA with that fused
// kernel, and the scale kept on the GPU as well, so that a captured CUDA graph (cuda_graph)
// multiplies by the current scale on every replay. Kept apart from the hook so that tests can
// drive it directly.
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
    sync_device_scale();
  }

  at::Tensor scale_loss(const at::Tensor& loss) {
    if (!loss.is_cuda()) return loss * scale_;
    return loss * device_scale(loss.device());
  }

  // Divides the gradients by the scale in place. Returns a 0-dim bool tensor on the
  // gradients' device, true when any gradient holds an inf or a NaN (no sync here).
  // The check is one float64 sum per gradient: it is finite exactly when every element is
  // (no float32 values can overflow it), and costs a third of isfinite + any.
  at::Tensor unscale_(const std::vector<at::Tensor>& grads) {
    torch::NoGradGuard no_grad;
    if (grads.empty()) return torch::zeros({}, torch::kBool);
    if (grads.front().is_cuda()) {
      // One fused pass over every gradient: multiply by 1 / scale, note any inf or NaN.
      const auto dev = grads.front().device();
      auto found_inf = torch::zeros({1}, torch::TensorOptions(dev).dtype(torch::kFloat));
      at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
                                                     device_scale(dev).reciprocal());
      return found_inf.squeeze(0) > 0;
    }
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
    } else if (++tracker_ >= growth_interval_) {
      scale_ *= growth_factor_;
      tracker_ = 0;
    } else {
      return;
    }
    sync_device_scale();
  }

 private:
  // The scale as a float32 tensor on the GPU (made at the first CUDA use), equal to scale_.
  const at::Tensor& device_scale(const at::Device& dev) {
    if (!scale_t_.defined() || scale_t_.device() != dev)
      scale_t_ = torch::full({}, scale_, torch::TensorOptions(dev).dtype(torch::kFloat));
    return scale_t_;
  }
  void sync_device_scale() {
    if (scale_t_.defined()) scale_t_.fill_(scale_);
  }

  at::Tensor scale_t_;
  double scale_;
  double growth_factor_, backoff_factor_;
  std::int64_t growth_interval_;
  std::int64_t tracker_ = 0;
};

}  // namespace wick::amp
