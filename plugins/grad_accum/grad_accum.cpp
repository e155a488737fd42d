// Gradient accumulation: N micro-batches per optimizer step. The backward loss is divided by
// the size of the accumulation window (shorter at the end of an epoch), so the accumulated
// gradient is the mean over the window; optimizer_step and zero_grad pass on only on the
// last micro-batch of a window. Its optimizer_step handler runs first (order -10), so
// unscaling, clipping and all-reduce further down the chain only see full windows.
#include <cstdint>

#include <wick/task.hpp>
#include <wick/wick.hpp>

namespace {

class GradAccum : public wick::Hook {
 public:
  explicit GradAccum(const wick::Params& p) : steps_(p.get_int("steps")) {
    if (steps_ < 1) throw p.error("steps", "must be >= 1 (micro-batches per optimizer step)");
  }

  void connect(wick::Registrar& r) override {
    const std::int64_t steps = steps_;
    r.on(wick::Point::before_fit, [steps](wick::Context& c) { c.set_accumulation(steps); });
    r.stage(wick::Stage::backward, [](wick::Context& c, wick::Next next) {
      const auto window = c.state().accum_window();
      if (window > 1) c.backward_loss() = c.backward_loss() / static_cast<double>(window);
      return next();
    });
    // Off a boundary the optimizer does not step and the gradients keep accumulating.
    r.stage(wick::Stage::optimizer_step, [](wick::Context& c, wick::Next next) {
      return c.state().is_accum_boundary() ? next() : false;
    });
    r.provides(wick::Stage::optimizer_step, wick::Capability::accumulated_gradients);
    r.stage(wick::Stage::zero_grad, [](wick::Context& c, wick::Next next) {
      return c.state().is_accum_boundary() ? next() : false;
    });
  }

 private:
  std::int64_t steps_;
};

}  // namespace

WICK_PLUGIN(GradAccum,
            wick::PluginDef("grad_accum", "2.0.0",
                            "Gradient accumulation: one optimizer step per N micro-batches")
                .one_instance()
                .order(-10)
                .param_required("steps", wick::ParamType::integer,
                                "micro-batches per optimizer step (the loss is divided by it)"))
