// Test plugin: declares a choice parameter (PluginDef::param_choice) and logs which choice it
// read, as "choice/<value>" = its index, at before_epoch (so tests can see get_string's value).
#include <algorithm>
#include <wick/wick.hpp>

namespace {

const std::vector<std::string> kModes = {"fast", "slow", "exact"};

class Choice : public wick::Hook {
 public:
  explicit Choice(const wick::Params& p) : mode_(p.get_string("mode")) {}
  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_epoch, [this](wick::Context& ctx) {
      const auto it = std::find(kModes.begin(), kModes.end(), mode_);
      ctx.log("choice/" + mode_, static_cast<double>(it - kModes.begin()));
    });
  }

 private:
  std::string mode_;
};

}  // namespace

WICK_PLUGIN(Choice, wick::PluginDef("choice", "1.0.0", "Test: a choice parameter")
                        .param_choice("mode", kModes, "fast", "how to run")
                        .param_float("scale", 1.0, "a float beside it"))
