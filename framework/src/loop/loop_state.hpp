// Private: where the loop is (its phase, position and dealing, the resume point), and the
// fit's clocks. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "data/epoch_start.hpp"
#include "loop/clock.hpp"
#include "wick/checkpoint.hpp"  // Position

namespace wick {

class StateDict;  // wick/state_dict.hpp

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

// Where a fit starts: the beginning, or where a checkpoint restored in before_fit left the
// run (Context::restore_checkpoint). Its only writers are the restore and the fit loop.
class ResumePoint {
 public:
  // A fit begins: no records to rewind yet.
  void begin_fit() { rewind_.reset(); }
  // A checkpoint at `at`, written after `records` metrics records by a run accumulating
  // `accumulation` micro-batches a step (0: not recorded), was restored.
  void restored(Position at, std::int64_t records, std::int64_t accumulation) {
    start_ = at;
    resumed_ = true;
    mid_epoch_ = at.batch > 0;
    rewind_ = records;
    accumulation_ = accumulation;
  }
  // "--resume auto" with nothing restored: a fresh start drops what a failed attempt logged.
  void start_afresh() { rewind_ = 0; }

  bool resumed() const { return resumed_; }
  const Position& start() const { return start_; }
  std::int64_t accumulation() const { return accumulation_; }
  std::int64_t first_epoch() const { return start_.epoch; }
  // The batch epoch `e` begins at: the restored position's in its epoch, else 0.
  std::int64_t first_batch(std::int64_t e) const { return e == start_.epoch ? start_.batch : 0; }
  // The metrics records to rewind to once before_fit is over (none: keep them all).
  const std::optional<std::int64_t>& rewind_records() const { return rewind_; }
  // Whether an epoch starting at `first_batch` continues the restored one, whose earlier
  // values were restored with it. True once: a later epoch starts its values afresh.
  bool take_mid_epoch(std::int64_t first_batch) {
    const bool continues = first_batch > 0 && mid_epoch_;
    mid_epoch_ = false;
    return continues;
  }

 private:
  Position start_;
  bool resumed_ = false;
  bool mid_epoch_ = false;
  std::optional<std::int64_t> rewind_;
  std::int64_t accumulation_ = 0;
};

// Where the loop is, one member of Trainer::Impl. The fit loop (fit_loop.cpp) moves it between
// epochs, the epoch loop (epoch.cpp) within an epoch, the step engine within a step; a
// checkpoint's restore sets it and a snapshot saves it. The Context reads it (Context::position,
// the phase that decides which services are open).
struct LoopPlace {
  LoopPhase phase = LoopPhase::outside;
  Position pos;  // where the loop is between steps
  ResumePoint resume;
  // Where this epoch's dealing of the order begins (data/sampler.hpp): saved in checkpoints,
  // moved when a run resumes on another world size or batch size.
  EpochStart epoch_start;
  // Training batches of an epoch dealt from its start at this run's world size and batch size
  // (Context::whole_epoch_batches); set as each training epoch begins.
  std::int64_t whole_epoch_batches = 0;
  // The training data's state after the last batch the loop consumed (has_state()): what a
  // checkpoint keeps, whatever the loader threads have loaded ahead.
  std::shared_ptr<StateDict> data_state;
};

// The fit's clocks and throughput counts (summary.json, epoch records).
struct RunTimes {
  Clock::time_point fit_start = Clock::now();
  double epoch_train_s = 0;       // the last epoch's training time, less the peak probe
  std::int64_t epoch_micro0 = 0;  // the micro step the last epoch began at
  double train_seconds = 0, train_cpu_seconds = 0;
  double first_step_s = -1;  // the process's age when its first training step began
  std::int64_t samples_this_run = 0;
  Clock::time_point summary_written{};  // the last "running" summary.json (note_progress)
};

}  // namespace wick
