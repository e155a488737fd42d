// Shared by the benchmark sections: timing statistics and child processes with their peak
// memory. Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace wick::bench {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Summary of repeated measurements (the samples are kept for the JSON).
struct Stats {
  std::vector<double> samples;
  double median = 0, min = 0, max = 0;
  // Relative half-spread (max - min) / (2 * median): how noisy the repetitions were.
  double spread() const { return median != 0 ? (max - min) / (2 * median) : 0; }
  json to_json() const;
};
Stats make_stats(std::vector<double> v);

struct ChildResult {
  int exit_code = -1;     // exit status, or 128 + signal
  std::string out, err;   // captured streams
  double wall_s = 0;      // fork to exit
  double max_rss_mb = 0;  // the child's own peak resident set (wait4), in MiB
};
// Runs argv (no shell) with extra environment entries "K=V", capturing both streams.
ChildResult run_child(const std::vector<std::string>& argv,
                      const std::vector<std::string>& env = {});

// What a `wick fit` run wrote to DIR/summary.json; throws unless it completed.
struct WickRun {
  double samples_per_s = 0;  // the trainer's own train_samples_per_s (wall time)
  double cpu_samples_per_s = 0;
  long faults = 0;  // minor page faults during fit() (validation included), when measured
  std::int64_t samples = 0;
  std::string fingerprint;
};
WickRun read_summary(const std::string& dir);

// A file's bytes ("" when it cannot be read).
std::string read_text(const std::filesystem::path& p);
// Peak resident set of this process so far, in MiB (VmHWM).
double self_peak_rss_mb();
// The 1-minute load average (how busy the shared machine was).
double load_average();
std::string self_exe();
// The full path of a program found in PATH ("" when absent).
std::string find_in_path(const std::string& prog);
// Instructions (Ir) of each callgrind dump in dir, by the label given to
// CALLGRIND_DUMP_STATS_AT.
std::map<std::string, double> read_callgrind_dumps(const std::string& dir);

// Everything the sections need to know about where things are and how long to run.
struct Settings {
  bool smoke = false;
  std::string wick_bin;          // build/bin/wick
  std::string source_dir;        // repository root
  std::string bench_plugin_dir;  // the no-op hook plugins built for the start-up section
  std::string plugin_dir;        // the built-in plugins
  std::string work_dir;          // scratch folder for configs and run directories
  std::string config;            // parity workload config ("" = choose)
  int reps = 6;                  // parity repetitions per side (in-process; even: see parity)
  int child_reps = 3;            // parity repetitions per side (separate processes)
  int ddp_rounds = 5;            // data-parallel scaling rounds per workload
  std::vector<std::string> peers_workloads;  // --peers-workloads (empty: all)
  std::vector<std::string> notes;
};

json run_parity(Settings& s);
json run_dispatch(Settings& s);
json run_callgrind(Settings& s);
json run_startup(Settings& s);
json run_ddp(Settings& s);
json run_loader(Settings& s);
json run_metrics(Settings& s);
// The torchscript task against the built-in C++ MLP (bench/torchscript.cpp).
json run_torchscript(Settings& s);
json run_restart(Settings& s);
// wick's Fashion-MNIST samples against a plain PyTorch loop (bench/python_peer.cpp).
json run_python(Settings& s);
json run_busy(Settings& s);
json run_peers(Settings& s);
// The profiler's overhead on the MLP step (bench/profiler.cpp).
json run_profiler(Settings& s);
json run_memory_tools(Settings& s);

// Child-process modes of wick_bench.
int hand_child_main(const std::string& config, const std::vector<std::string>& sets,
                    unsigned long long perm_seed);
int parity_callgrind_main(const std::string& config, const std::vector<std::string>& sets,
                          long steps);
int dispatch_callgrind_main(long steps);
int load_plugins_main(const std::vector<std::string>& files);

}  // namespace wick::bench
