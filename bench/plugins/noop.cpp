// A hook that does nothing, built ten times under different names (WICK_BENCH_NOOP_NAME) so
// that the start-up benchmark can load ten plugins whatever else is built.
#include <wick/context.hpp>
#include <wick/plugin.hpp>

namespace {

class Noop : public wick::Hook {
 public:
  explicit Noop(const wick::Params& p) { (void)p.get_int("every"); }
  void connect(wick::Registrar& r) override {
    r.on(wick::Point::after_step, [](wick::Context&) {});
  }
};

}  // namespace

WICK_PLUGIN(Noop,
            wick::PluginDef(WICK_BENCH_NOOP_NAME, "1.0.0", "No-op hook for the start-up benchmark")
                .param_int("every", 1, "unused; a parameter so the schema check runs"))
