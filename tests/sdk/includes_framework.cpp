// Test plugin that must not build: it includes a framework header (the Trainer), which a
// plugin cannot see (a plugin's include path holds the SDK headers alone). Built by the test
// "a plugin that includes a framework header does not build" (tests/sdk.cmake), never with
// the tree.
#include <wick/plugin.hpp>
#include <wick/trainer.hpp>

namespace {
class ReachesIn : public wick::Hook {
 public:
  explicit ReachesIn(const wick::Params&) {}
  void connect(wick::Registrar&) override {}
};
}  // namespace

WICK_PLUGIN(ReachesIn, wick::PluginDef("reaches_in", "1.0.0", "Test: includes wick/trainer.hpp"))
