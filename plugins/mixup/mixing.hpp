// What mixup and cutmix share. Each training batch is mixed with a permutation of itself:
// the forward stage sees the mixed input, and at after_loss the loss becomes
//   lam * loss(pred, target) + (1 - lam) * loss(pred, target[perm]),
// both from the task's own loss(), so any loss of a classifier works. lam ~ Beta(alpha, alpha)
// and the permutation are drawn from a generator seeded by (run seed, rank, training batch
// number): a resumed run draws exactly what the uninterrupted run drew, with no state to save.
// Validation batches are left alone. A second forward in the same step (SAM's
// Context::recompute_loss) keeps the batch mixed once and mixes the loss again.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace wick::mixing {

class Mixing : public Hook {
 public:
  Mixing(const Params& p, std::string name, std::uint64_t salt)
      : alpha_(p.get_float("alpha")), name_(std::move(name)), salt_(salt) {
    if (!(alpha_ > 0)) throw p.error("alpha", "must be > 0 (the Beta(alpha, alpha) parameter)");
  }

  void connect(Registrar& r) override {
    r.stage(Stage::forward, [this](Context& c, Next next) {
      if (!c.state().training()) return next();
      if (mixed_at_ != c.state().micro_step) {
        auto& b = c.batch();
        at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed(c));
        const auto gam = at::_standard_gamma(torch::full({2}, alpha_, torch::kDouble), g);
        lam_ = gam[0].item<double>() / (gam[0].item<double>() + gam[1].item<double>());
        const auto n = b.input.size(0);
        const auto perm = torch::randperm(n, g, torch::kLong).to(b.input.device());
        lam_ = mix(b.input, perm, lam_, g);
        target_b_ = b.target.index_select(0, perm);
        mixed_at_ = c.state().micro_step;
        c.log(name_ + "/lambda", lam_);
      }
      return next();
    });
    r.on(Point::after_loss, [this](Context& c) {
      if (!c.state().training() || mixed_at_ != c.state().micro_step) return;
      Batch other{c.batch().input, target_b_};
      auto& out = c.output();
      const auto loss_b = c.task().loss(c, out.pred, other).loss;
      out.loss = lam_ * out.loss + (1 - lam_) * loss_b;
    });
  }

 protected:
  // Mixes `input` (a batch on the run's device) in place or by replacing it with `perm`'s
  // samples; returns the weight of the original samples' targets.
  virtual double mix(at::Tensor& input, const at::Tensor& perm, double lam, at::Generator& g) = 0;

 private:
  std::uint64_t seed(const Context& c) const {
    // splitmix64 over the run seed, the rank, the batch number and the plugin's salt.
    std::uint64_t z = static_cast<std::uint64_t>(c.run().seed) * 0x9E3779B97F4A7C15ull ^
                      (static_cast<std::uint64_t>(c.state().micro_step) << 20) ^
                      (static_cast<std::uint64_t>(c.run().rank) << 52) ^ salt_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  double alpha_;
  std::string name_;
  std::uint64_t salt_;
  double lam_ = 1;
  std::int64_t mixed_at_ = -1;
  at::Tensor target_b_;
};

}  // namespace wick::mixing
