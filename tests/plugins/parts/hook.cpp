#include "parts.hpp"

namespace parts {

// Reaches the task typed at every prediction: logs what it reads, and checks that the
// TorchScript part follows the model's train/eval switch.
class PartsProbe : public wick::Hook {
 public:
  explicit PartsProbe(const wick::Params&) {}
  void connect(wick::Registrar& r) override {
    r.on(wick::Point::after_pred, [](wick::Context& ctx) {
      auto& task = ctx.task<PartsTask>();  // std::logic_error for another task
      if (!ctx.state().training()) return;
      ctx.log("parts/forwards", static_cast<double>(task.forwards()));
      if (!task.has_jit()) return;
      ctx.log("parts/jit_sum", task.jit_sum());
      ctx.log("parts/jit_training", task.jit_training() ? 1.0 : 0.0);
    });
    r.on(wick::Point::before_valid, [](wick::Context& ctx) {
      auto& task = ctx.task<PartsTask>();
      if (task.has_jit() && task.jit_training())
        throw std::runtime_error("the TorchScript part is in training mode during validation");
    });
  }
};

}  // namespace parts

WICK_PLUGINS(
    WICK_ENTRY(parts::PartsTask,
               wick::PluginDef("parts_task", "1.0.0",
                               "Test: regression through TorchScript and bare-tensor parts")
                   .param_int("samples", 64, "training samples")
                   .param_string("jit", "", "a TorchScript .pt file for the part enc")
                   .param_choice("jit_mode", {"frozen", "trainable"}, "frozen",
                                 "how the part is trained")
                   .param_bool("share", false, "register the part's weight twice")),
    WICK_ENTRY(parts::PartsProbe,
               wick::PluginDef("parts_probe", "1.0.0",
                               "Test: reads the parts task through ctx.task<T>()")))
