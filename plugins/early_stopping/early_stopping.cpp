// Early stopping on an epoch metric: stops the fit (gracefully, after the epoch) when
// `monitor` has not improved by more than min_delta for `patience` epochs. The best value
// and the patience counter are checkpoint state, so a resumed run keeps counting.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include <wick/context.hpp>
#include <wick/plugin.hpp>
#include <wick/state_dict.hpp>

namespace {

class EarlyStopping : public wick::Hook {
 public:
  explicit EarlyStopping(const wick::Params& p)
      : monitor_(p.get_string("monitor")),
        patience_(p.get_int("patience")),
        min_delta_(p.get_float("min_delta")) {
    maximize_ = p.get_string("mode") == "max";
    if (patience_ < 1) throw p.error("patience", "must be >= 1 (epochs without improvement)");
    if (min_delta_ < 0) throw p.error("min_delta", "must be >= 0");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::after_epoch, [this](wick::Context& c) { check(c); });
  }

  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override {
    out.set_int("has_best", has_best_ ? 1 : 0);
    out.set_float("best", best_);
    out.set_int("best_epoch", best_epoch_);
    out.set_int("wait", wait_);
  }
  void load_state(const wick::StateDict& in) override {
    has_best_ = in.get_int("has_best") != 0;
    best_ = in.get_float("best");
    best_epoch_ = in.get_int("best_epoch");
    wait_ = in.get_int("wait");
  }

 private:
  void check(wick::Context& c) {
    const auto& rec = c.last_record();
    const auto v = rec.get(monitor_);
    if (!v) {
      std::string keys;
      for (const auto& kv : rec.values) keys += (keys.empty() ? "" : ", ") + kv.first;
      throw std::runtime_error("early_stopping: the epoch record has no '" + monitor_ +
                               "' (it has: " + keys +
                               "); set monitor to one of these, or give the task validation data");
    }
    const double x = *v;
    if (!std::isfinite(x)) {  // no improvement: a NaN or an overflow is no best
      ++wait_;
    } else if (!has_best_ || (maximize_ ? x > best_ + min_delta_ : x < best_ - min_delta_)) {
      has_best_ = true;
      best_ = x;
      best_epoch_ = c.state().epoch;
      wait_ = 0;
    } else {
      ++wait_;
    }
    if (wait_ >= patience_) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", best_);
      c.request_stop("early_stopping: " + monitor_ + " has not improved for " +
                     std::to_string(wait_) + " epochs " +
                     (has_best_ ? "(best " + std::string(buf) + " at epoch " +
                                      std::to_string(best_epoch_) + ")"
                                : "(it was never a number: NaN or infinite in every epoch)"));
    }
  }

  std::string monitor_;
  std::int64_t patience_;
  double min_delta_;
  bool maximize_ = false;
  bool has_best_ = false;
  double best_ = 0;
  std::int64_t best_epoch_ = -1;
  std::int64_t wait_ = 0;
};

}  // namespace

WICK_PLUGIN(EarlyStopping,
            wick::PluginDef("early_stopping", "1.0.0",
                            "Stops training when a validation metric stops improving")
                .order(10)
                .param_string("monitor", "valid/loss", "epoch metric to watch")
                .param_choice("mode", {"min", "max"}, "min", "min: lower is better; max: higher")
                .param_int("patience", 3, "epochs without improvement before stopping")
                .param_float("min_delta", 0.0, "smallest change that counts as an improvement"))
