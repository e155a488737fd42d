// Test plugin: logs "late/x" (the optimizer step) on every training step from the second
// epoch on, so that a metrics sink sees a key that appears only after the first records.
#include <wick/wick.hpp>

namespace {
class LateKey : public wick::Hook {
 public:
  explicit LateKey(const wick::Params&) {}
  void connect(wick::Registrar& r) override {
    r.on(wick::Point::after_step, [](wick::Context& c) {
      if (c.state().training() && c.state().epoch >= 1)
        c.log("late/x", static_cast<double>(c.state().optimizer_step));
    });
  }
};
}  // namespace

WICK_PLUGIN(LateKey, wick::PluginDef("late_key", "1.0.0", "test: logs late/x from epoch 1 on"))
