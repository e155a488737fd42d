// Run outputs: metrics.jsonl lines and summary.json. Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wick/files.hpp"
#include "wick/metrics.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

struct Summary {
  std::string status;  // completed, cancelled, failed
  std::string error;
  std::string stop_reason;
  std::int64_t epochs = 0;  // epochs completed
  std::int64_t optimizer_steps = 0;
  std::int64_t micro_steps = 0;
  std::int64_t samples_seen = 0;
  std::int64_t skipped_steps = 0;
  std::int64_t cancelled_steps = 0;
  std::int64_t cancelled_epochs = 0;
  std::int64_t num_processes = 1;
  double train_samples_per_s = 0;
  double train_cpu_s = 0;  // process CPU time (all threads) in the training batches
  double wall_s = 0;
  std::vector<std::pair<std::string, double>> valid;  // final validation metrics
  // Values hooks logged after the last record (at after_fit, after_cancel): the fit's last
  // record holds them too. Written as top-level keys, after the validation metrics.
  std::vector<std::pair<std::string, double>> logged;
  std::string model_fingerprint;
  // The final weights written at the end (model.pt, "" when none was) and which they are:
  // "trained", or the word of a hook that keeps weights for evaluation ("ema").
  std::string model_file, model_weights;
  std::string config;                  // absolute path of the config file ("" in host programs)
  std::vector<std::string> overrides;  // its --set values
  std::string profile_json;            // wick/profile.hpp's profile_json() when profiled
  std::string memory_json;             // and its memory_json()
  double flops_per_step = 0;           // per process, counted at the first step (0: none)
  double peak_gflops = 0;              // what train/flops_utilization compares with
  std::int64_t batch_size = 0;         // per process
  int threads = 0;                     // intra-op threads the run trained with (0: unknown)
  std::string threads_from;  // why that many: "auto: 1.02 of 2 cores free", "trainer.threads"
  double start_to_first_step_s = -1;  // the process's start to its first training step
  std::string batch_size_search;      // TrainerOptions::batch_size_search (JSON) when "auto"
};

std::string record_to_json(const Record& r);
// Whether `key` is one of the fields every metrics line has (kind, epoch, step, samples_seen,
// time_s), which no logged value may take.
bool is_record_field(std::string_view key);
// The inverse, for a line of metrics.jsonl (null values become NaN). Throws on a line that
// is not a record.
Record record_from_json(const std::string& line);
// summary.json's text.
std::string summary_json(const Summary& s);
// Written to a temporary file and renamed, so a reader never sees half a summary.
void write_summary(const std::filesystem::path& file, const Summary& s);
// write_file_atomic is in the SDK (wick/files.hpp).

// A fit that failed before it started (a plugin, the task or a config value refused): writes
// OUTPUT_DIR/summary.json as failed with the error, so that an earlier run's "completed" there
// is not taken for this run's. Only into a folder that exists and that no live fit holds (its
// wick.lock); returns whether it wrote.
bool write_failed_start_summary(const std::filesystem::path& output_dir, const std::string& error,
                                const std::string& config,
                                const std::vector<std::string>& overrides);

}  // namespace wick

WICK_PUBLIC_END
