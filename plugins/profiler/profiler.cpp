// Where a run's time goes. Asks the host to time every hook at every point, every stage
// handler (its own time) and the phases of each training step (data, forward, loss, backward,
// optimizer, hooks, records; validation as a whole). At the end of the fit (completed or not)
// it prints the table sorted by total time and writes profile.json; summary.json carries the
// same under "profile". Then the peak memory of each phase (summary.json's "memory"). Without
// this hook nothing is timed or counted.
#include <wick/wick.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>

namespace {

namespace fs = std::filesystem;

class Profiler : public wick::Hook {
 public:
  explicit Profiler(const wick::Params& p) : file_(p.get_string("file")), top_(p.get_int("top")) {
    if (file_.empty()) throw p.error("file", "must not be empty");
    if (top_ < 0) throw p.error("top", "must be >= 0 (0: every row)");
  }

  void connect(wick::Registrar& r) override {
    r.request_profile();
    r.on(wick::Point::after_fit, [this](wick::Context& c) { report(c); });
    r.on(wick::Point::after_cancel, [this](wick::Context& c) {
      if (c.cancellation()->ends_fit()) report(c);
    });
  }

 private:
  void report(wick::Context& c) {
    const auto p = c.profile();
    if (!p.enabled) return;
    std::fprintf(stderr, "wick: profile (rank %lld)\n%s", static_cast<long long>(c.run().rank),
                 wick::profile_table(p, static_cast<std::size_t>(top_)).c_str());
    std::fprintf(stderr, "wick: peak memory per phase (rank %lld)\n%s",
                 static_cast<long long>(c.run().rank),
                 wick::memory_table(c.memory_profile()).c_str());
    if (c.run().output_dir.empty()) return;
    const fs::path path =
        fs::path(file_).is_absolute() ? fs::path(file_) : fs::path(c.run().output_dir) / file_;
    wick::write_file_atomic(path.string(), wick::profile_json(p) + "\n");
  }

  std::string file_;
  std::int64_t top_;
};

}  // namespace

WICK_PLUGIN(Profiler,
            wick::PluginDef("profiler", "1.1.0",
                            "time every hook, stage handler and step phase, and each phase's "
                            "peak memory; tables at the end, profile.json")
                .order(1000)
                .main_process_only()
                .param_string("file", "profile.json", "JSON file, relative to the run directory")
                .param_int("top", 25, "rows of the printed table (0: every row)"))
