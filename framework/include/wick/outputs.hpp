// Run outputs: metrics.jsonl lines and summary.json. Torch-free.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "wick/metrics.hpp"

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
  std::string model_fingerprint;
};

std::string record_to_json(const Record& r);
// Written to a temporary file and renamed, so a reader never sees half a summary.
void write_summary(const std::filesystem::path& file, const Summary& s);
// Writes bytes to file atomically (temporary file, fsync, rename, fsync of the folder).
void write_file_atomic(const std::filesystem::path& file, const std::string& bytes);

}  // namespace wick
