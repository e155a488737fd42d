// Sharpness-aware minimization (Foret et al., 2021), in the optimizer_step chain: with the
// step's gradient g at the weights w, it moves to w + e, e = rho * g / ||g|| (the norm over
// all parameters), takes the gradient there with a second forward and backward
// (Context::recompute_loss: the forward stage, the loss hooks and the task's loss run again),
// puts w back and lets the optimizer step with that second gradient. Each step costs two
// forward and two backward passes.
// Composes with grad_clip (order 0 > -2: the step's final gradient is clipped), bf16
// mixed precision, channels_last, label_smoothing, mixup and cutmix. Refused: grad_accum (the
// second pass would see only the window's last micro-batch), ddp (the second gradient would
// not be all-reduced), several optimizers and manual optimization.
#include <cmath>
#include <string>
#include <vector>

#include <wick/params.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace {

class Sam : public wick::Hook {
 public:
  explicit Sam(const wick::Params& p) : rho_(p.get_float("rho")) {
    if (!(rho_ > 0)) throw p.error("rho", "must be > 0 (the neighbourhood radius, e.g. 0.05)");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [](wick::Context& c) { refuse_what_cannot_compose(c); });
    r.stage(wick::Stage::optimizer_step, [this](wick::Context& c, wick::Next next) {
      perturbed_step(c);
      return next();
    });
    r.needs(wick::Stage::optimizer_step, wick::Capability::unscaled_gradients,
            "the step to w + e is measured on the true gradient, after loss scaling is undone");
  }

 private:
  static void refuse_what_cannot_compose(wick::Context& c) {
    const std::string why = "sam needs a second forward and backward pass per optimizer step";
    if (c.task().manual_optimization())
      throw wick::ConfigError(
          why +
          ", which it runs through the trainer; this task drives its own steps "
          "(manual optimization): take SAM's two passes in its train_step instead");
    if (c.optimizer_names().size() > 1)
      throw wick::ConfigError(why + " over the whole model; this run has " +
                              std::to_string(c.optimizer_names().size()) +
                              " optimizers: use one [optimizer]");
    if (c.state().grad_accum_steps > 1)
      throw wick::ConfigError(
          why + " on the whole batch, but with grad_accum (steps = " +
          std::to_string(c.state().grad_accum_steps) +
          ") it would see only the last micro-batch; remove grad_accum and raise "
          "trainer.batch_size, or remove sam");
    if (c.collectives())
      throw wick::ConfigError(
          why +
          ", and with ddp its gradient would not be all-reduced; train on one process "
          "or remove sam");
  }

  void perturbed_step(wick::Context& c) {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> params, saved;
    std::vector<at::Tensor> norms;
    for (const auto& group : c.optimizer().param_groups())
      for (const auto& p : group.params())
        if (p.grad().defined()) {
          params.push_back(p);
          // Float32 at least (bf16 gradients), float64 for a float64 model.
          norms.push_back(
              p.grad().to(at::promote_types(p.grad().scalar_type(), torch::kFloat)).norm());
        }
    if (params.empty()) return;
    const auto norm = torch::stack(norms).norm();
    c.log("sam/grad_norm", norm);
    const auto scale = rho_ / (norm + 1e-12);
    for (auto& p : params) {
      // The weights are copied, not restored by subtracting e: (w + e) - e is not always w.
      saved.push_back(p.detach().clone());
      p.detach().add_(p.grad() * scale.to(p.grad().scalar_type()));
      p.mutable_grad().zero_();
    }
    {
      torch::AutoGradMode grad(true);
      c.recompute_loss();
    }
    for (std::size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(saved[i]);
  }

  double rho_;
};

}  // namespace

WICK_PLUGIN(Sam, wick::PluginDef("sam", "1.0.0",
                                 "Sharpness-aware minimization: step with the gradient taken at "
                                 "w + rho * g / ||g||")
                     .one_instance()
                     .order(-2)
                     .param_float("rho", 0.05,
                                  "radius of the neighbourhood the loss is "
                                  "climbed in before each step"))
