// A well-formed hook plugin whose declared name comes from MIN_NAME (see CMakeLists.txt):
// built twice as "twin" in two folders, and once as wick_a.so declaring "b".
#include <wick/plugin.hpp>

namespace {
struct Minimal : wick::Hook {
  explicit Minimal(const wick::Params&) {}
  void connect(wick::Registrar&) override {}
};
}  // namespace

WICK_PLUGIN(Minimal, wick::PluginDef(MIN_NAME, "1.0.0", "Test: a minimal hook"))
