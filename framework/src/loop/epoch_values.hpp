// Private: the per-batch values of the current training epoch (loss and the task's training
// metrics), kept detached and unsynced until a record needs them (no host sync per step), and
// how far records have folded them in. A checkpoint mid-epoch keeps them, so that the resumed
// epoch's records are the uninterrupted run's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for test_loop.
WICK_PUBLIC_BEGIN

namespace wick {

class StateDict;

// Each value is a batch's mean, weighed by the batch's samples in a record's mean: an epoch's
// train/loss is the mean over its samples, as valid/loss is (a short last batch counts for
// its samples, not as a whole batch).
struct EpochValues {
  std::vector<at::Tensor> losses;
  std::vector<double> loss_samples;              // [step]: the batch's samples on this rank
  std::vector<std::string> names;                // Output::metrics of training steps
  std::vector<std::vector<at::Tensor>> metrics;  // [name][step]
  std::vector<std::vector<double>> metric_samples;
  std::size_t logged_loss = 0;  // values already folded into a step record
  std::vector<std::size_t> logged_metric;

  void clear();
  void add_loss(const at::Tensor& v, std::int64_t samples);
  void add_metric(const std::string& name, const at::Tensor& v, std::int64_t samples);
  // Everything since the last step record is logged now.
  void mark_logged();
  void save(StateDict& out) const;
  // A checkpoint written before the sample counts were kept weighs each of its batches as
  // `batch_size` samples.
  void load(const StateDict& in, std::int64_t batch_size);
};

}  // namespace wick

WICK_PUBLIC_END
