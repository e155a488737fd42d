// minimal_hook: stops the fit once the validation accuracy reaches a target.
// Build: find_package(wick) and wick_add_plugin(minimal_hook SOURCES minimal_hook.cpp).
// Enable: [[hooks]] plugin = "minimal_hook", target = 0.9 in the run's TOML file.
#include <wick/wick.hpp>

namespace {

class MinimalHook : public wick::Hook {
 public:
  // p holds the validated table: unknown keys and wrong types never reach this point.
  explicit MinimalHook(const wick::Params& p) : target_(p.get_float("target")) {
    if (target_ <= 0 || target_ > 1) throw p.error("target", "must be in (0, 1]");
  }

  void connect(wick::Registrar& r) override {
    // after_epoch fires once the epoch's record, with its validation metrics, is written.
    r.on(wick::Point::after_epoch, [this](wick::Context& ctx) {
      auto acc = ctx.last_record().get("valid/accuracy");
      if (acc && *acc >= target_) ctx.request_stop("valid/accuracy reached the target");
    });
  }

 private:
  double target_;
};

}  // namespace

WICK_PLUGIN(MinimalHook, wick::PluginDef("minimal_hook", "0.1.0",
                                         "Stops the fit once valid/accuracy reaches a target")
                             .param_float("target", 0.9, "accuracy to stop at, in (0, 1]"))
