// Private: the framework's side of the Context (wick/context.hpp). Every service a plugin
// reaches through its Context goes to one component of the loop through this view: the
// Context sees the loop's values and the components it serves from, never the Trainer's
// state as a whole (context.cpp does not include trainer_impl.hpp).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dist/data_parallel.hpp"
#include "loop/dispatch.hpp"
#include "loop/loop_state.hpp"
#include "loop/stop_signals.hpp"
#include "optim/optimizers.hpp"
#include "records/record_writer.hpp"
#include "wick/context.hpp"
#include "wick/task.hpp"

namespace wick {

// The step engine's calls (step.cpp): what a task under manual optimization asks for, and the
// second pass an optimizer_step handler asks for. Each refuses a call from the wrong place.
class StepCalls {
 public:
  virtual void manual_backward(const at::Tensor& loss, std::string_view optimizer) = 0;
  virtual bool manual_step(std::string_view optimizer) = 0;
  virtual void manual_zero_grad(std::string_view optimizer) = 0;
  virtual at::Tensor handler_recompute_loss() = 0;

 protected:
  ~StepCalls() = default;
};

// The run's checkpoints (checkpoints.cpp): what the checkpoint plugin asks to write, inspect
// and restore.
class CheckpointStore {
 public:
  virtual CheckpointInfo save_checkpoint(const std::string& folder, const std::string& reason) = 0;
  virtual CheckpointInfo inspect_checkpoint(const std::string& folder) const = 0;
  virtual CheckpointInfo restore_checkpoint(const std::string& folder) = 0;

 protected:
  ~CheckpointStore() = default;
};

struct Context::Host {
  // Where the loop is and what the run is.
  StepState& state;
  const RunInfo& run;
  const LoopPhase& phase;
  const Position& pos;
  // The step engine: the running step's values, what it trains, its calls.
  Batch& batch;
  Output& output;
  at::Tensor& backward_loss;
  const std::shared_ptr<torch::nn::Module>& model;
  const std::shared_ptr<Task>& task;
  std::vector<NamedOptimizer>& optimizers;
  const std::size_t& current_optimizer;  // the one the running stage works for
  StepCalls& steps;
  // The records, the profiler (the dispatcher's) and the fit's clock it measures from.
  RecordWriter& records;
  const Dispatcher& dispatch;
  const RunTimes& times;
  // Stop requests and the cancellation after_cancel hooks hear of.
  StopRequests& stops;
  // The job's ranks: collectives, sharded optimizer state.
  DataParallel& dp;
  CheckpointStore& checkpoints;
};

}  // namespace wick
