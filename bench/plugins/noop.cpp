// A hook that does nothing, compiled once and linked into ten libraries, each with its own
// name (noop_name.cpp), so that the start-up benchmark can load ten plugins whatever else is
// built.
#include <wick/context.hpp>
#include <wick/plugin.hpp>

const char* wick_bench_noop_name();  // noop_name.cpp, one per library

namespace {

class Noop : public wick::Hook {
 public:
  explicit Noop(const wick::Params& p) { (void)p.get_int("every"); }
  void connect(wick::Registrar& r) override {
    r.on(wick::Point::after_step, [](wick::Context&) {});
  }
};

}  // namespace

WICK_PLUGIN(Noop, wick::PluginDef(wick_bench_noop_name(), "1.0.0",
                                  "No-op hook for the start-up benchmark")
                      .param_int("every", 1, "unused; a parameter so the schema check runs"))
