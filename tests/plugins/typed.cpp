// Test plugin: declares one parameter of each type and one required key, so that config
// tests can check validation of plugin tables (unknown keys, wrong types, missing keys).
// It subscribes to no point.
#include <wick/plugin.hpp>

namespace {

class Typed : public wick::Hook {
 public:
  explicit Typed(const wick::Params& p) {
    if (p.get_float("max_norm") <= 0) throw p.error("max_norm", "must be > 0");
  }
  void connect(wick::Registrar&) override {}
};

}  // namespace

WICK_PLUGIN(Typed, wick::PluginDef("typed", "1.0.0", "Test: one parameter of each type")
                       .param_float("max_norm", 1.0, "a float")
                       .param_int("steps", 3, "an integer")
                       .param_bool("flag", false, "a boolean")
                       .param_string("mode", "fast", "a string")
                       .param_int_list("sizes", {1, 2}, "integers")
                       .param_float_list("ratios", {0.5}, "numbers")
                       .param_string_list("names", {"a"}, "strings")
                       .param_required("target", wick::ParamType::string, "a required string"))
