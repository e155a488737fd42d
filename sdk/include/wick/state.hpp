// StepState: where the loop is. Hooks read it; the trainer and stage handlers update it.
#pragma once

#include <cstdint>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

enum class Phase : std::uint8_t { train, valid };

struct StepState {
  std::int64_t epoch = 0;             // 0-based epoch being run
  std::int64_t epochs = 0;            // epochs configured for the fit
  std::int64_t batch_idx = 0;         // batch index within the current epoch (and phase)
  std::int64_t batches_in_epoch = 0;  // batches this process runs in the current phase
  std::int64_t optimizer_step = 0;    // optimizer steps really taken since the start of training
  std::int64_t micro_step = 0;        // training batches run since the start of training
  std::int64_t samples_seen = 0;      // training samples seen, summed over all processes
  std::int64_t batch_size = 0;        // samples in the current batch on this process
  std::int64_t grad_accum_steps = 1;  // micro-batches per optimizer step (set by grad_accum)
  std::int64_t num_processes = 1;     // data-parallel world size
  std::int64_t rank = 0;              // this process's rank
  Phase phase = Phase::train;
  bool stepped = false;            // did the optimizer really step on this batch
  std::int64_t skipped_steps = 0;  // optimizer steps declined (non-finite grads, NaN loss)
  // Since SDK 2.9: the current epoch was entered in its middle by a resume (`--resume` from a
  // checkpoint at batch_idx > 0), from its before_epoch to its end. before_epoch fires then
  // too, but the epoch is resumed, not begun: per-epoch state (an LSTM's hidden state) came
  // back with the checkpoint and must not be reset. batch_idx is the batch it continues at.
  bool epoch_resumed = false;

  bool training() const { return phase == Phase::train; }
  bool validating() const { return phase == Phase::valid; }
  bool is_main_process() const { return rank == 0; }

  // True on the last micro-batch of an accumulation window. The last, shorter window of an
  // epoch is a boundary too, so every epoch ends with a real step.
  bool is_accum_boundary() const {
    return (batch_idx + 1) % grad_accum_steps == 0 || batch_idx + 1 == batches_in_epoch;
  }
  // Micro-batches in the accumulation window this batch belongs to (shorter at epoch end).
  std::int64_t accum_window() const {
    std::int64_t start = batch_idx - batch_idx % grad_accum_steps;
    std::int64_t end = start + grad_accum_steps;
    if (end > batches_in_epoch) end = batches_in_epoch;
    return end - start;
  }
};

}  // namespace wick

WICK_PUBLIC_END
