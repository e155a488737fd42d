// A plugin whose choice parameter's default is not among its own choices (CHOICE_DEFAULT), or,
// with CHOICE_NONE, a choice parameter declared through param_required, which has no choices.
#include <wick/plugin.hpp>

namespace {
struct ChoiceBug : wick::Hook {
  explicit ChoiceBug(const wick::Params&) {}
  void connect(wick::Registrar&) override {}
};
}  // namespace

#ifdef CHOICE_NONE
WICK_PLUGIN(ChoiceBug, wick::PluginDef(CHOICE_NAME, "1.0.0", "Test: a choice without choices")
                           .param_required("mode", wick::ParamType::choice, "how to run"))
#else
WICK_PLUGIN(ChoiceBug, wick::PluginDef(CHOICE_NAME, "1.0.0", "Test: a bad choice default")
                           .param_choice("mode", {"fast", "slow"}, CHOICE_DEFAULT, "how to run"))
#endif
