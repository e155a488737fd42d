// Exponential moving average of the parameters: after every `every`-th real optimizer step,
// shadow = d * shadow + (1 - d) * param, shadow starting as the initial parameters, with
// d = decay, or d = min(decay, (1 + n) / (10 + n)) for the n-th update (from 0) with warmup.
// Validation runs on the shadow weights: they are swapped in at before_valid and swapped back
// at after_epoch. The default order (-20) puts the swap-back ahead of other after_epoch hooks,
// so a checkpoint saved there holds the training weights (the shadow goes in EMA's own state).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <wick/context.hpp>
#include <wick/plugin.hpp>
#include <wick/state_dict.hpp>
#include <wick/task.hpp>

namespace {

class Ema : public wick::Hook {
 public:
  explicit Ema(const wick::Params& p)
      : decay_(p.get_float("decay")), every_(p.get_int("every")), warmup_(p.get_bool("warmup")) {
    if (!(decay_ >= 0 && decay_ < 1)) throw p.error("decay", "must be in [0, 1), e.g. 0.999");
    if (every_ < 1) throw p.error("every", "must be >= 1 (optimizer steps between updates)");
  }

  void connect(wick::Registrar& r) override {
    // A shadow loaded from a checkpoint (before or after this) wins over the fresh copy.
    r.on(wick::Point::before_fit, [this](wick::Context& c) {
      swap_out(c);  // after a Trainer::validate() outside fit (no after_epoch ends it)
      if (shadow_.empty()) init(c);
    });
    r.on(wick::Point::after_step, [this](wick::Context& c) {
      const auto& s = c.state();
      if (!s.training() || !s.stepped || s.optimizer_step % every_ != 0) return;
      update(c);
    });
    r.on(wick::Point::before_valid, [this](wick::Context& c) { swap_in(c); });
    r.on(wick::Point::after_epoch, [this](wick::Context& c) { swap_out(c); });
    r.on(wick::Point::after_cancel, [this](wick::Context& c) { swap_out(c); });
  }

  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override {
    out.set_int("updates", updates_);
    // Loaded but not yet placed on the model's device: save what was loaded.
    const auto& s = shadow_.empty() ? loaded_ : shadow_;
    out.set_int("num_tensors", static_cast<std::int64_t>(s.size()));
    for (std::size_t i = 0; i < s.size(); ++i) out.set_tensor("shadow." + std::to_string(i), s[i]);
  }
  // The shadow, for model.pt and export / evaluate / predict with --weights auto: the weights
  // validation used. Buffers are not averaged: the model's own.
  std::string eval_weights(const torch::nn::Module& model, wick::NamedTensors& out) const override {
    const auto& s = shadow_.empty() ? loaded_ : shadow_;
    const auto named = model.named_parameters();
    if (s.empty()) return "";
    if (s.size() != named.size())
      throw std::runtime_error("ema: " + std::to_string(s.size()) +
                               " shadow tensors for the model's " + std::to_string(named.size()) +
                               " parameters");
    for (std::size_t i = 0; i < s.size(); ++i) out.emplace_back(named[i].key(), s[i]);
    return "ema";
  }

  void load_state(const wick::StateDict& in) override {
    updates_ = in.get_int("updates");
    const auto n = static_cast<std::size_t>(in.get_int("num_tensors"));
    loaded_.clear();
    for (std::size_t i = 0; i < n; ++i)
      loaded_.push_back(in.get_tensor("shadow." + std::to_string(i)));
    shadow_.clear();  // moved to the parameters' device at the next use
  }

 private:
  std::vector<at::Tensor> params(wick::Context& c) const { return c.model().parameters(); }

  void init(wick::Context& c) {
    torch::NoGradGuard no_grad;
    shadow_.clear();
    auto ps = params(c);
    if (!loaded_.empty()) {
      if (loaded_.size() != ps.size())
        throw std::runtime_error("ema: the checkpoint holds " + std::to_string(loaded_.size()) +
                                 " shadow tensors but the model has " + std::to_string(ps.size()) +
                                 " parameters");
      for (std::size_t i = 0; i < ps.size(); ++i)
        shadow_.push_back(loaded_[i].to(ps[i].device(), ps[i].scalar_type()).clone());
      loaded_.clear();
      return;
    }
    for (const auto& p : ps) shadow_.push_back(p.detach().clone());
  }

  void update(wick::Context& c) {
    if (shadow_.empty()) init(c);
    torch::NoGradGuard no_grad;
    auto ps = params(c);
    // zero3 frees the parameters other ranks own between steps: no whole model to average.
    for (const auto& p : ps)
      if (p.numel() == 0)
        throw std::runtime_error(
            "ema averages the whole model's weights after each step, but a parameter is empty "
            "here: the data-parallel strategy (zero3) keeps only each rank's own parameters "
            "between steps; use ddp with ema");
    // With warm-up the early updates follow the weights closely, so that a short run does
    // not validate what are still mostly the initial weights.
    const double n = static_cast<double>(updates_);
    const double d = warmup_ ? std::min(decay_, (1 + n) / (10 + n)) : decay_;
    // lerp: shadow + (1 - d) (param - shadow), one pass instead of two.
    for (std::size_t i = 0; i < ps.size(); ++i) shadow_[i].lerp_(ps[i].detach(), 1.0 - d);
    ++updates_;
  }

  void swap_in(wick::Context& c) {
    if (swapped_) return;
    if (shadow_.empty()) init(c);
    torch::NoGradGuard no_grad;
    auto ps = params(c);
    backup_.clear();
    for (std::size_t i = 0; i < ps.size(); ++i) {
      backup_.push_back(ps[i].detach().clone());
      ps[i].detach().copy_(shadow_[i]);
    }
    swapped_ = true;
  }

  void swap_out(wick::Context& c) {
    if (!swapped_) return;
    torch::NoGradGuard no_grad;
    auto ps = params(c);
    for (std::size_t i = 0; i < ps.size(); ++i) ps[i].detach().copy_(backup_[i]);
    backup_.clear();
    swapped_ = false;
  }

  double decay_;
  std::int64_t every_;
  bool warmup_;
  std::int64_t updates_ = 0;
  std::vector<at::Tensor> shadow_, backup_, loaded_;
  bool swapped_ = false;
};

}  // namespace

WICK_PLUGIN(Ema, wick::PluginDef("ema", "1.0.0",
                                 "Exponential moving average of the weights, used for validation")
                     .order(-20)
                     .param_float("decay", 0.999, "shadow = decay * shadow + (1 - decay) * param")
                     .param_int("every", 1, "update the shadow every N optimizer steps")
                     .param_bool("warmup", false,
                                 "use decay min(decay, (1 + n) / (10 + n)) for the n-th update"))
