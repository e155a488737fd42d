// Private: the step engine. A training step (before_step to after_step), the stage chains'
// defaults, backward and the optimizers' steps (the task drives them under manual
// optimization), Context::recompute_loss's second pass, and the forward and loss that
// validation shares. It owns the running step's values; what it works with (the options,
// hooks, task, optimizers, the loop's counters and measures) is the trainer's, bound once.
// The hooks come through a StageRunner and the batches through a BatchSource, so that its unit
// tests (tests/test_step_engine.cpp) give their own.
#pragma once

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

#include <torch/torch.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/batch_loader.hpp"
#include "loop/epoch_values.hpp"
#include "loop/flop_meter.hpp"
#include "loop/forward_pass.hpp"
#include "loop/loop_events.hpp"
#include "loop/loop_state.hpp"
#include "loop/loss_check.hpp"
#include "loop/profiler.hpp"
#include "optim/optimizers.hpp"
#include "wick/options.hpp"
#include "wick/task.hpp"

// Exported for its unit tests, as the Evaluator is.
WICK_PUBLIC_BEGIN

namespace wick {

class StepEngine : public ForwardPass {
 public:
  // What a step works with, owned by the trainer (bound before some of it is constructed).
  struct Parts {
    const TrainerOptions& opt;  // nan_policy
    const torch::Device& device;
    StageRunner& stages;  // the hooks' points and stage chains (the dispatcher's)
    Context& ctx;         // what the task and the stages' defaults are given
    const std::shared_ptr<Task>& task;
    std::vector<NamedOptimizer>& optimizers;
    StepState& state;
    LoopPlace& loop;  // phase: step inside; pos and the data's state when a step ends
    FlopMeter& flops;
    RunTimes& times;
    EpochValues& epoch;                     // the step's loss and metrics go there
    std::function<void()> log_step_if_due;  // the run outputs' step record
  };
  explicit StepEngine(Parts parts) : p_(std::move(parts)) {}
  StepEngine(const StepEngine&) = delete;
  StepEngine& operator=(const StepEngine&) = delete;

  // The running step's values (Context::batch, output, backward_loss, optimizer).
  Batch batch;
  Output output;
  // Context::set_extra's tensors: forward's, for loss; cleared with output each step.
  std::vector<std::pair<std::string, at::Tensor>> extras;
  at::Tensor backward_loss;
  bool manual = false;          // the task drives backward and steps (manual optimization)
  std::size_t current_opt = 0;  // the optimizer the running stage works for
  NamedOptimizer& current_optimizer() { return p_.optimizers[current_opt]; }
  // The losses of training steps under nan_policy "error", read in batches (loss_check.hpp).
  LossCheck loss_check;

  // The stage chains' defaults: the task's forward, backward, the optimizer's step, zero_grad.
  void install_stage_defaults();
  void train_step(BatchSource& loader);
  // The forward stage, after_pred, the task's loss, after_loss (validation shares them).
  void forward_and_loss();
  Batch to_device(Batch b) const;
  // An evaluation pass's batch (ForwardPass).
  const Output& run_batch(Batch b, bool with_loss) override;
  const Batch& running_batch() const override { return batch; }

  // The Context's calls, each refused outside its place: backward, step and zero_grad of a
  // task's train_step under manual optimization; recompute_loss of an optimizer_step handler.
  void manual_backward(const at::Tensor& loss, std::string_view optimizer);
  bool manual_step(std::string_view optimizer);
  void manual_zero_grad(std::string_view optimizer);
  at::Tensor handler_recompute_loss();

 private:
  torch::optim::Optimizer& optim() { return *current_optimizer().optimizer; }
  void check_manual_call(const char* call) const;
  // Runs the optimizer_step and zero_grad chains for optimizer i; true when it stepped.
  bool step_optimizer(std::size_t i);
  void zero_grad_optimizer(std::size_t i);
  void backward(const at::Tensor& loss, std::size_t i);
  at::Tensor recompute_loss();
  // The profiler inside a training step (its phases), else null: validation steps share
  // forward_and_loss but are timed as a whole.
  Profiler* step_profiler() const {
    return in_step(p_.loop.phase) ? p_.stages.profiler() : nullptr;
  }

  Parts p_;
  bool skip_batch_ = false;         // a non-finite loss under nan_policy "skip": no optimizer step
  bool optimizer_stepped_ = false;  // an optimizer_step chain's default ran in this step
  bool loss_kept_ = false;          // this step's backward gave loss_check its loss
};

}  // namespace wick

WICK_PUBLIC_END
