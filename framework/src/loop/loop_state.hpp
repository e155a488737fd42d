// Private: where the loop is (its phase), where a resumed fit starts, and the fit's clocks.
// Torch-free.
#pragma once

#include <cstdint>

#include "loop/clock.hpp"
#include "wick/checkpoint.hpp"  // Position

namespace wick {

// Where the loop is, for the services that are only valid in some places (Context::step
// inside a manual step, recompute_loss inside an optimizer_step handler, checkpoints between
// steps).
enum class LoopPhase {
  outside,     // no fit running (construction, Trainer::validate, evaluate, predict)
  before_fit,  // in fit(), while before_fit runs: the one place a checkpoint is restored
  fit,         // in fit(), between training steps (validation included)
  step,        // inside a training step: before_step to the step's record
  recompute,   // inside Context::recompute_loss, within a training step
};
inline bool in_step(LoopPhase p) {
  return p == LoopPhase::step || p == LoopPhase::recompute;
}

// Where a fit starts when a checkpoint was restored (Context::restore_checkpoint).
struct ResumePoint {
  Position start;                    // where fit() begins
  bool resumed = false;              // a checkpoint was restored
  bool mid_epoch = false;            // `epoch` holds the resumed epoch's earlier values
  std::int64_t rewind_records = -1;  // after before_fit: rewind the records to this count
};

// The fit's clocks and throughput counts (summary.json, epoch records).
struct RunTimes {
  Clock::time_point fit_start = Clock::now();
  double epoch_train_s = 0;       // the last epoch's training time, less the peak probe
  std::int64_t epoch_micro0 = 0;  // the micro step the last epoch began at
  double train_seconds = 0, train_cpu_seconds = 0;
  double first_step_s = -1;  // the process's age when its first training step began
  std::int64_t samples_this_run = 0;
};

}  // namespace wick
