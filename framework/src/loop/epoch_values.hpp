// Private: the per-batch values of the current training epoch (loss and the task's training
// metrics), kept detached and unsynced until a record needs them (no host sync per step), and
// how far records have folded them in. A checkpoint mid-epoch keeps them, so that the resumed
// epoch's records are the uninterrupted run's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>
#include <vector>

namespace wick {

class StateDict;

struct EpochValues {
  std::vector<at::Tensor> losses;
  std::vector<std::string> names;                // Output::metrics of training steps
  std::vector<std::vector<at::Tensor>> metrics;  // [name][step]
  std::size_t logged_loss = 0;                   // values already folded into a step record
  std::vector<std::size_t> logged_metric;

  void clear();
  void add_metric(const std::string& name, const at::Tensor& v);
  // Everything since the last step record is logged now.
  void mark_logged();
  void save(StateDict& out) const;
  void load(const StateDict& in);
};

}  // namespace wick
