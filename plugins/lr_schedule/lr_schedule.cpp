// Learning-rate schedules on optimizer steps. With t the optimizer steps taken so far (the
// lr set for step t+1), W = warmup_steps, T = total_steps, base = each group's lr as the
// config gives it (this run's config's on a resume, so a resume with another lr takes it):
//   warm-up (t < W):  base * (t + 1) / W
//   then, with p = (t - W) / (T - W) clamped to [0, 1]:
//   constant  base
//   linear    min_lr + (base - min_lr) * (1 - p)
//   cosine    min_lr + (base - min_lr) * (1 + cos(pi p)) / 2
//   step      base * gamma ^ floor((t - W) / step_size)
//   onecycle  PyTorch's OneCycleLR (cosine, two phases): lo = base / div_factor, end = lo /
//             final_div_factor, the peak at P = pct_start * T - 1, the end at T - 1:
//             t <= P: lo + (base - lo) * (1 - cos(pi t / P)) / 2
//             else:   end + (base - end) * (1 + cos(pi (t - P) / (T - 1 - P))) / 2
// The schedule advances only when the optimizer really stepped (not on accumulation
// micro-batches nor on steps the loss scaler skipped).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <wick/context.hpp>
#include <wick/plugin.hpp>
#include <wick/state_dict.hpp>
#include <wick/task.hpp>

namespace {

enum class Kind { constant, linear, cosine, step, onecycle };

class LrSchedule : public wick::Hook {
 public:
  explicit LrSchedule(const wick::Params& p)
      : warmup_(p.get_int("warmup_steps")),
        configured_total_(p.get_int("total_steps")),
        min_lr_(p.get_float("min_lr")),
        step_size_(p.get_int("step_size")),
        gamma_(p.get_float("gamma")),
        pct_start_(p.get_float("pct_start")),
        div_factor_(p.get_float("div_factor")),
        final_div_factor_(p.get_float("final_div_factor")),
        optimizer_(p.get_string("optimizer")),
        instance_(p.instance()),
        per_epoch_(p.get_string("unit") == "epochs") {
    const auto k = p.get_string("kind");
    if (k == "constant")
      kind_ = Kind::constant;
    else if (k == "linear")
      kind_ = Kind::linear;
    else if (k == "cosine")
      kind_ = Kind::cosine;
    else if (k == "step")
      kind_ = Kind::step;
    else  // the last of the declared choices
      kind_ = Kind::onecycle;
    if (warmup_ < 0) throw p.error("warmup_steps", "must be >= 0");
    if (configured_total_ < 0)
      throw p.error("total_steps", "must be >= 0 (0: derive from the run)");
    if (min_lr_ < 0) throw p.error("min_lr", "must be >= 0");
    if (kind_ == Kind::step && step_size_ < 1)
      throw p.error("step_size", "kind = \"step\" needs step_size >= 1 (steps between decays)");
    if (!(gamma_ > 0)) throw p.error("gamma", "must be > 0");
    if (kind_ == Kind::onecycle) {
      if (warmup_ > 0)
        throw p.error("warmup_steps",
                      "onecycle warms up by itself (pct_start); leave warmup_steps at 0");
      if (!(pct_start_ > 0 && pct_start_ < 1)) throw p.error("pct_start", "must be in (0, 1)");
      if (!(div_factor_ >= 1)) throw p.error("div_factor", "must be >= 1");
      if (!(final_div_factor_ >= 1)) throw p.error("final_div_factor", "must be >= 1");
    }
    if (configured_total_ > 0 && configured_total_ <= warmup_)
      throw p.error("total_steps", "must be greater than warmup_steps");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) {
      const auto names = c.optimizer_names();
      if (!optimizer_.empty() && std::find(names.begin(), names.end(), optimizer_) == names.end()) {
        std::string known;
        for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
        throw wick::ConfigError("hooks." + instance_ + ".optimizer = \"" + optimizer_ +
                                "\" names no optimizer of this run; its optimizers: " + known);
      }
      base_.clear();
      total_ = configured_total_;  // resumed_total_ is the checkpoint's (restored before this)
      for (const auto& n : names)
        if (optimizer_.empty() || n == optimizer_)
          for (std::size_t g = 0; g < c.optimizer(n).param_groups().size(); ++g) {
            base_.push_back(c.configured_lr(n, g));
            // A decay that would climb: min_lr is where linear and cosine end.
            if ((kind_ == Kind::linear || kind_ == Kind::cosine) && min_lr_ > base_.back()) {
              char buf[96];
              std::snprintf(buf, sizeof buf, "min_lr = %g is above the lr %g", min_lr_,
                            base_.back());
              throw wick::ConfigError("hooks." + instance_ + "." + buf + " of optimizer '" + n +
                                      "' (group " + std::to_string(g) +
                                      ") that it decays from; set min_lr below it");
            }
          }
    });
    // The number of batches is known from before_epoch on.
    r.on(wick::Point::before_epoch, [this](wick::Context& c) {
      if (total_ == 0) total_ = derive_total(c);
      // A resume into a longer or shorter run (epochs, max_steps, batch size, total_steps):
      // the schedule spans this run, not the checkpoint's.
      if (resumed_total_ > 0 && resumed_total_ != total_ && c.state().is_main_process())
        std::fprintf(stderr,
                     "wick: note: hooks.%s spans %lld %s in this run, %lld in the checkpoint's; "
                     "it goes on from step %lld of the new length\n",
                     instance_.c_str(), static_cast<long long>(total_),
                     per_epoch_ ? "epochs" : "optimizer steps",
                     static_cast<long long>(resumed_total_), static_cast<long long>(steps_));
      resumed_total_ = resumed_epoch_steps_ = 0;
      apply(c);
    });
    // t counts real optimizer steps, or finished epochs with unit = "epochs".
    r.on(wick::Point::after_step, [this](wick::Context& c) {
      if (per_epoch_ || !c.state().training() || !c.state().stepped) return;
      ++steps_;
      apply(c);
    });
    if (per_epoch_) r.on(wick::Point::after_epoch, [this](wick::Context&) { ++steps_; });
  }

  bool has_state() const override { return true; }
  // The base lrs and the length are this run's config's, not state: a resume with another lr,
  // total_steps or run length (derived) takes them. The checkpoint's length is kept to say so.
  void save_state(wick::StateDict& out) const override {
    out.set_int("steps", steps_);
    out.set_int("total_steps", total_);
    out.set_int("epoch_steps", epoch_steps_);
  }
  void load_state(const wick::StateDict& in) override {
    steps_ = in.get_int("steps");
    resumed_total_ = in.get_int("total_steps");
    resumed_epoch_steps_ = in.has("epoch_steps") ? in.get_int("epoch_steps") : 0;
  }

 private:
  // The parameter groups this schedule drives: every optimizer's, or the named one's.
  std::vector<torch::optim::OptimizerParamGroup*> groups(wick::Context& c) const {
    std::vector<torch::optim::OptimizerParamGroup*> out;
    for (const auto& name : c.optimizer_names())
      if (optimizer_.empty() || name == optimizer_)
        for (auto& g : c.optimizer(name).param_groups()) out.push_back(&g);
    return out;
  }

  // epochs x optimizer steps per epoch (the last, short accumulation window steps too),
  // capped by trainer.max_steps; with unit = "epochs", the epochs. Resumed on another world
  // size, batch size or accumulation, the epochs before had other lengths than the ones after:
  // the length is then the steps run, the resumed epoch's left and the later epochs'.
  // A warm-up as long as the run is stretched past it (the decay never starts): said once.
  std::int64_t derive_total(wick::Context& c) {
    const auto& s = c.state();
    std::int64_t t = s.epochs;
    if (!per_epoch_) {
      const std::int64_t k = s.grad_accum_steps, whole = c.whole_epoch_batches();
      const std::int64_t per_epoch = (whole + k - 1) / k;
      epoch_steps_ = per_epoch;
      const auto big = std::numeric_limits<std::int64_t>::max();
      // Resumed on another geometry: this epoch dealt anew, or the checkpoint's epochs had
      // another number of steps (another world size, batch size or accumulation).
      const bool other = s.batches_in_epoch != whole ||
                         (resumed_epoch_steps_ > 0 && resumed_epoch_steps_ != per_epoch);
      if (!other) {
        if (__builtin_mul_overflow(t, per_epoch, &t)) t = big;
      } else {
        // The windows run so far (each stepped or skipped), this epoch's left (a window ends
        // at each k-th batch of the epoch and at its last: StepState), the later epochs'.
        const std::int64_t from = s.batch_idx, end = s.batches_in_epoch;
        const std::int64_t left = end / k - from / k + (end % k != 0 ? 1 : 0);
        if (__builtin_mul_overflow(s.epochs - s.epoch - 1, per_epoch, &t) ||
            __builtin_add_overflow(t, s.optimizer_step + s.skipped_steps + left, &t))
          t = big;
      }
      const auto max_steps = c.run().max_steps;
      if (max_steps > 0 && max_steps < t) t = max_steps;
    }
    if (t > warmup_) return t;
    if (s.is_main_process())
      std::fprintf(stderr,
                   "wick: warning: hooks.%s.warmup_steps = %lld is not below the run's %lld %s: "
                   "the lr is still warming up when training ends; lower warmup_steps\n",
                   instance_.c_str(), static_cast<long long>(warmup_), static_cast<long long>(t),
                   per_epoch_ ? "epochs" : "optimizer steps");
    return warmup_ + 1;
  }

  double lr_at(double base, std::int64_t t) const {
    const double pi = 3.14159265358979323846;
    if (kind_ == Kind::onecycle) {
      const double lo = base / div_factor_, end = lo / final_div_factor_;
      const double peak = pct_start_ * static_cast<double>(total_) - 1;
      const double last = static_cast<double>(total_ - 1);
      const double x = static_cast<double>(std::min(t, total_ - 1));
      auto anneal = [pi](double from, double to, double p) {
        return to + (from - to) * (1 + std::cos(pi * p)) / 2;
      };
      if (x <= peak) return peak > 0 ? anneal(lo, base, x / peak) : base;
      return last > peak ? anneal(base, end, (x - peak) / (last - peak)) : end;
    }
    if (t < warmup_) return base * static_cast<double>(t + 1) / static_cast<double>(warmup_);
    double p = static_cast<double>(t - warmup_) / static_cast<double>(total_ - warmup_);
    p = std::min(1.0, std::max(0.0, p));
    switch (kind_) {
      case Kind::constant:
        return base;
      case Kind::linear:
        return min_lr_ + (base - min_lr_) * (1 - p);
      case Kind::cosine:
        return min_lr_ + (base - min_lr_) * (1 + std::cos(pi * p)) / 2;
      case Kind::step:
        return base * std::pow(gamma_, static_cast<double>((t - warmup_) / step_size_));
      case Kind::onecycle:
        break;
    }
    return base;
  }

  void apply(wick::Context& c) {
    auto gs = groups(c);
    // Not logged here: the trainer records the lr each step trained with, where this sets
    // the next step's (an epoch's record took the next epoch's first lr).
    for (std::size_t i = 0; i < gs.size() && i < base_.size(); ++i)
      gs[i]->options().set_lr(lr_at(base_[i], steps_));
  }

  Kind kind_ = Kind::constant;
  std::int64_t warmup_;
  std::int64_t configured_total_;         // total_steps as configured (0: derive from the run)
  std::int64_t total_ = 0;                // this fit's length, once known
  std::int64_t resumed_total_ = 0;        // the checkpoint's length, until this run's is derived
  std::int64_t epoch_steps_ = 0;          // optimizer steps of a whole epoch, when derived
  std::int64_t resumed_epoch_steps_ = 0;  // the checkpoint's (0: not derived, or older)
  double min_lr_;
  std::int64_t step_size_;
  double gamma_, pct_start_, div_factor_, final_div_factor_;
  std::int64_t steps_ = 0;
  std::vector<double> base_;
  std::string optimizer_, instance_;
  bool per_epoch_;
};

}  // namespace

WICK_PLUGIN(LrSchedule,
            wick::PluginDef("lr_schedule", "1.0.0",
                            "Learning-rate schedule per optimizer step, with linear warm-up")
                .order(5)
                .param_choice("kind", {"constant", "linear", "cosine", "step", "onecycle"},
                              "constant", "the schedule's shape")
                .param_choice("unit", {"steps", "epochs"}, "steps",
                              "what warmup_steps, total_steps and step_size count: optimizer "
                              "steps, or epochs (the lr then changes at each epoch's start)")
                .param_string("optimizer", "",
                              "the optimizer to schedule, by name (\"\": every optimizer)")
                .param_int("warmup_steps", 0, "optimizer steps of linear warm-up to the base lr")
                .param_int("total_steps", 0,
                           "optimizer steps the schedule spans (0: epochs x steps per epoch, "
                           "capped by trainer.max_steps)")
                .param_float("min_lr", 0.0, "linear, cosine: the lr reached at the end")
                .param_int("step_size", 0, "step: optimizer steps between decays")
                .param_float("gamma", 0.1, "step: decay factor")
                .param_float("pct_start", 0.3, "onecycle: fraction of the steps spent rising")
                .param_float("div_factor", 25.0, "onecycle: start lr = base / div_factor")
                .param_float("final_div_factor", 1e4,
                             "onecycle: final lr = start lr / final_div_factor"))
