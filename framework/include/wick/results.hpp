// What a Trainer's fit, evaluate and predict return. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

struct FitResult {
  enum class Status { completed, cancelled, failed };
  Status status = Status::completed;
  std::string error;          // "plugin 'x' at after_step: message" when failed
  std::string stop_reason;    // why a graceful stop was requested, or why the fit was cancelled
  int signal = 0;             // the signal that stopped it (SIGINT, SIGTERM, SIGHUP, SIGUSR1), or 0
  bool config_error = false;  // failed on a configuration error found only at run time
  // The final weights written when the fit ended (output_dir/model.pt; "" when none was: see
  // TrainerOptions::save_model) and which they are: "trained", or the word of a hook that
  // keeps weights for evaluation ("ema").
  std::string model_file, model_weights;
  // 0, 1 (failed), 2 (configuration error) or 128 + the signal when stopped by one (130
  // SIGINT, 143 SIGTERM, 129 SIGHUP, 138 SIGUSR1)
  int exit_code() const;
};
const char* to_string(FitResult::Status s);

struct ValidResult {
  std::int64_t samples = 0;
  std::vector<std::pair<std::string, double>> values;  // "valid/loss", "valid/accuracy", ...
};

// Which of the task's data sets evaluate() and predict() run over.
enum class Split { valid, train };
const char* to_string(Split s);  // "valid", "train"

// Called after each batch of predict(): samples done (on this rank) and of how many.
using ProgressFn = std::function<void(std::int64_t done, std::int64_t total)>;

}  // namespace wick

WICK_PUBLIC_END
