// Private: the framework's side of the Context (wick/context.hpp). Every service a plugin
// reaches through its Context goes to one component of the loop through this view (the step
// engine, the records, the profiler, the stop requests, the data-parallel strategy, the
// checkpoint store): the Context never sees the Trainer's state as a whole (context.cpp does
// not include trainer_impl.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/data_parallel.hpp"
#include "loop/dispatch.hpp"
#include "loop/loop_state.hpp"
#include "loop/step_engine.hpp"
#include "loop/stop_signals.hpp"
#include "optim/optimizers.hpp"
#include "records/record_writer.hpp"
#include "wick/context.hpp"

namespace wick {

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
  const LoopPlace& loop;
  // What the run trains, and the step engine: the running step's values and its calls.
  const std::shared_ptr<torch::nn::Module>& model;
  const std::shared_ptr<Task>& task;
  std::vector<NamedOptimizer>& optimizers;
  StepEngine& steps;
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
