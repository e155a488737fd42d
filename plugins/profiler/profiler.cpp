// Where a run's time goes. Asks the host to time every hook at every point, every stage
// handler (its own time) and the phases of each training step (data, forward, loss, backward,
// optimizer, hooks, records; validation as a whole). At the end of the fit (completed or not)
// it prints the table sorted by total time and writes profile.json; summary.json carries the
// same under "profile". Then the peak memory of each phase (summary.json's "memory"). Without
// this hook nothing is timed or counted. On CUDA the steps and phases are timed on the GPU's
// timeline, or with `clock = "host"` on the host's clock (for a step that waits for the host);
// `kernels` adds a table of the GPU kernels that a window of steps ran (kernel_trace.hpp).
#include <wick/wick.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "kernel_trace.hpp"

namespace {

namespace fs = std::filesystem;

class Profiler : public wick::Hook {
 public:
  explicit Profiler(const wick::Params& p)
      : path_(p.get_output_file("file")),
        host_clock_(p.get_string("clock") == "host"),
        top_(p.get_int("top")),
        kernels_(p.get_int("kernels")),
        kernel_after_(p.get_int("kernel_after")),
        kernel_steps_(p.get_int("kernel_steps")) {
    if (top_ < 0) throw p.error("top", "must be >= 0 (0: every row)");
    if (kernels_ < 0) throw p.error("kernels", "must be >= 0 (0: no kernel table)");
    if (kernel_after_ < 0) throw p.error("kernel_after", "must be >= 0");
    if (kernel_steps_ < 1) throw p.error("kernel_steps", "must be >= 1");
    if (kernels_ > 0 && !wick_profiler::KernelTrace::available())
      throw p.error("kernels", "needs LibTorch 2.x; set it to 0");
  }

  void connect(wick::Registrar& r) override {
    r.request_profile_on(host_clock_ ? wick::ProfileClock::host : wick::ProfileClock::device);
    r.on(wick::Point::after_fit, [this](wick::Context& c) { report(c); });
    r.on(wick::Point::after_cancel, [this](wick::Context& c) {
      if (c.cancellation()->ends_fit()) report(c);
    });
    if (kernels_ == 0) return;
    r.on(wick::Point::before_fit, [this](wick::Context& c) {
      if (!c.run().device.is_cuda())
        std::fprintf(stderr,
                     "wick: profiler: kernels = %lld: the run is not on CUDA, so no kernel "
                     "table\n",
                     static_cast<long long>(kernels_));
    });
    r.on(wick::Point::before_step, [this](wick::Context& c) {
      if (c.run().device.is_cuda() && c.state().micro_step == kernel_after_) start_trace();
    });
    r.on(wick::Point::after_step, [this](wick::Context& c) {
      if (trace_.running() && c.state().micro_step >= kernel_after_ + kernel_steps_)
        print_trace(c, kernel_steps_);
    });
  }

 private:
  void start_trace() {
    try {
      trace_.start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "wick: profiler: %s\n", e.what());
    }
  }
  void print_trace(wick::Context& c, std::int64_t steps) {
    std::fprintf(stderr, "wick: GPU kernels of batches %lld to %lld (rank %lld)\n%s",
                 static_cast<long long>(kernel_after_ + 1),
                 static_cast<long long>(kernel_after_ + steps),
                 static_cast<long long>(c.run().rank), trace_.stop(steps, kernels_).c_str());
  }

  void report(wick::Context& c) {
    // A fit shorter than the window: the batches it ran.
    if (trace_.running()) print_trace(c, c.state().micro_step - kernel_after_);
    const auto p = c.profile();
    if (!p.enabled) return;
    std::fprintf(stderr, "wick: profile (rank %lld%s)\n%s", static_cast<long long>(c.run().rank),
                 host_clock_ && c.run().device.is_cuda() ? ", the steps on the host's clock" : "",
                 wick::profile_table(p, static_cast<std::size_t>(top_)).c_str());
    std::fprintf(stderr, "wick: peak memory per phase (rank %lld)\n%s",
                 static_cast<long long>(c.run().rank),
                 wick::memory_table(c.memory_profile()).c_str());
    if (c.run().output_dir.empty()) return;
    fs::create_directories(path_.parent_path());
    wick::write_file_atomic(path_.string(), wick::profile_json(p) + "\n");
  }

  fs::path path_;
  bool host_clock_;
  std::int64_t top_, kernels_, kernel_after_, kernel_steps_;
  wick_profiler::KernelTrace trace_;
};

}  // namespace

WICK_PLUGIN(Profiler,
            wick::PluginDef("profiler", "1.2.0",
                            "time every hook, stage handler and step phase, and each phase's "
                            "peak memory; tables at the end, profile.json")
                .order(1000)
                .main_process_only()
                .param_string("file", "profile.json", "JSON file, relative to the run directory")
                .param_choice("clock", {"device", "host"}, "device",
                              "CUDA runs: \"device\" times the steps and their phases on the "
                              "GPU's timeline (CUDA events); \"host\" on the host's clock, for "
                              "a step that waits for the host")
                .param_int("top", 25, "rows of the printed table (0: every row)")
                .param_int("kernels", 0,
                           "CUDA runs: rows of a table of the GPU kernels run by batches "
                           "kernel_after + 1 to kernel_after + kernel_steps, by GPU time, with "
                           "the GPU's busy share of the window (0: no table; LibTorch 2.x)")
                .param_int("kernel_after", 10, "batches run before the kernel window")
                .param_int("kernel_steps", 5, "batches in the kernel window"))
