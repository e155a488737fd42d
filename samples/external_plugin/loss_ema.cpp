// loss_ema: logs an exponential moving average of the training loss as "train/loss_ema"
// and keeps it in checkpoints, so a resumed run continues the same curve.
// Shows a hook that touches tensors (hence <wick/task.hpp>, which includes LibTorch), a
// validated parameter, and checkpoint state.
#include <wick/task.hpp>
#include <wick/wick.hpp>

namespace {

class LossEma : public wick::Hook {
 public:
  explicit LossEma(const wick::Params& p) : decay_(p.get_float("decay")) {
    if (!(decay_ >= 0.0 && decay_ < 1.0)) throw p.error("decay", "must be in [0, 1)");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::after_loss, [this](wick::Context& ctx) {
      if (!ctx.state().training()) return;  // after_loss also fires during validation
      auto loss = ctx.output().loss.detach().to(torch::kDouble);
      ema_ = ema_.defined() ? decay_ * ema_ + (1.0 - decay_) * loss : loss;
      ctx.log("train/loss_ema", ema_);  // a tensor: no device sync per step
    });
  }

  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override {
    if (ema_.defined()) out.set_tensor("ema", ema_);
  }
  void load_state(const wick::StateDict& in) override {
    if (in.has("ema")) ema_ = in.get_tensor("ema");
  }

 private:
  double decay_;
  at::Tensor ema_;  // undefined until the first training batch
};

}  // namespace

WICK_PLUGIN(LossEma, wick::PluginDef("loss_ema", "1.0.0",
                                     "Logs an exponential moving average of the training loss")
                         .order(50)
                         .param_float("decay", 0.9, "weight of the old average, in [0, 1)"))
