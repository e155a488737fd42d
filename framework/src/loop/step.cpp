// The step engine (step_engine.hpp).
#include <cmath>
#include <optional>
#include <stdexcept>

#include "cuda/cuda_support.hpp"
#include "loop/backward_here.hpp"
#include "loop/step_engine.hpp"
#include "optim/bf16_copies.hpp"
#include "wick/hook.hpp"  // Cancel
#include "wick/system.hpp"

namespace wick {

namespace {

// Whether a scalar loss is finite, for nan_policy "skip", which must know before the
// optimizer steps. On the CPU the value is read in place: item() goes through the dispatcher
// and costs about a microsecond per step (measured by wick_bench); on a GPU it waits for the
// step's work, which "skip" asks for ("error" does not: LossCheck).
bool loss_is_finite(const at::Tensor& loss) {
  if (loss.device().is_cpu() && loss.numel() == 1 && loss.layout() == at::kStrided) {
    if (loss.scalar_type() == at::kFloat) return std::isfinite(*loss.data_ptr<float>());
    if (loss.scalar_type() == at::kDouble) return std::isfinite(*loss.data_ptr<double>());
  }
  return std::isfinite(loss.item<double>());
}

}  // namespace

// The defaults at the end of each stage chain.
void StepEngine::install_stage_defaults() {
  StepEngine* e = this;
  p_.stages.set_terminal(Stage::forward, [e](Context& c) {
    e->output.pred = e->p_.task->forward(c, e->batch);
    return true;
  });
  p_.stages.set_terminal(Stage::backward, [e](Context&) {
    BackwardHere here;
    e->backward_loss.backward();
    return true;
  });
  p_.stages.set_terminal(Stage::gradients, [e](Context&) {
    e->forward_and_loss();
    e->backward(e->output.loss, 0);
    return true;
  });
  p_.stages.set_terminal(Stage::optimizer_step, [e](Context&) {
    e->optim().step();
    e->optimizer_stepped_ = true;
    return true;
  });
  // Gradients are set to none rather than zeroed: less memory traffic, same result.
  p_.stages.set_terminal(Stage::zero_grad, [e](Context&) {
    for (auto& group : e->optim().param_groups())
      for (auto& p : group.params()) p.mutable_grad() = at::Tensor();
    return true;
  });
}

Batch StepEngine::to_device(Batch b) const {
  if (p_.device.is_cpu()) return b;
  // From page-locked memory (LoadPlan::pin) on a copy stream: overlapped with the previous
  // step's work still running on the GPU. Predict's inputs have no target (undefined stays so).
  at::Tensor moved[] = {std::move(b.input), std::move(b.target)};
  cuda::to_device_async(moved, 2, p_.device);
  b.input = std::move(moved[0]);
  b.target = std::move(moved[1]);
  return b;
}

const Output& StepEngine::run_batch(Batch b, bool with_loss) {
  batch = to_device(std::move(b));
  if (with_loss) {
    forward_and_loss();
  } else {
    output = Output{};
    extras.clear();
    p_.stages.run_stage(Stage::forward);
  }
  return output;
}

// The calls of a task's train_step under manual optimization, and of an optimizer_step
// handler's second pass, each refused outside its place.
void StepEngine::check_manual_call(const char* call) const {
  if (!manual || !in_step(p_.loop.phase) || !p_.state.training())
    throw std::logic_error(std::string("Context::") + call +
                           " is for a task's train_step under manual optimization "
                           "(Task::manual_optimization() returning true)");
}
void StepEngine::manual_backward(const at::Tensor& loss, std::string_view optimizer) {
  check_manual_call("backward");
  backward(loss, optimizer_index(p_.optimizers, optimizer));
}
bool StepEngine::manual_step(std::string_view optimizer) {
  check_manual_call("step");
  const bool stepped = step_optimizer(optimizer_index(p_.optimizers, optimizer));
  if (stepped) p_.state.stepped = true;
  return stepped;
}
void StepEngine::manual_zero_grad(std::string_view optimizer) {
  check_manual_call("zero_grad");
  zero_grad_optimizer(optimizer_index(p_.optimizers, optimizer));
}
at::Tensor StepEngine::handler_recompute_loss() {
  if (manual || p_.loop.phase != LoopPhase::step || !p_.state.training())
    throw std::logic_error(
        "Context::recompute_loss is for an optimizer_step handler of a training step (not "
        "under manual optimization, not inside another recompute_loss)");
  return recompute_loss();
}

void StepEngine::backward(const at::Tensor& loss, std::size_t i) {
  // While a CUDA graph captures the step, nothing may wait for the GPU, and the captured loss
  // is overwritten by each replay: the step's published loss is kept instead (train_step).
  if (p_.opt.nan_policy != NanPolicy::ignore && !cuda::capturing(p_.device)) {
    if (p_.opt.nan_policy == NanPolicy::skip) {
      if (!loss_is_finite(loss)) {
        skip_batch_ = true;
        return;
      }
    } else {
      loss_check.add(loss, {p_.state.epoch, p_.state.batch_idx, p_.state.optimizer_step,
                            p_.optimizers.size() > 1 ? p_.optimizers[i].name : ""});
      loss_kept_ = true;
    }
  }
  current_opt = i;
  backward_loss = loss;
  {
    PhaseTimer t(step_profiler(), Profiler::backward);
    p_.stages.run_stage(Stage::backward);
  }
  {
    PhaseTimer t(step_profiler(), Profiler::hooks);
    p_.stages.emit(Point::after_backward);
  }
  current_opt = 0;
}

bool StepEngine::step_optimizer(std::size_t i) {
  PhaseTimer t(step_profiler(), Profiler::optimizer);
  current_opt = i;
  bool stepped = false;
  try {
    stepped = !skip_batch_ && p_.stages.run_stage(Stage::optimizer_step);
  } catch (const CancelStep&) {
    // Weights have moved (this optimizer's, or an earlier one's in this step): a cancelled
    // step would count none, and the counters, schedules and checkpoints would part from the
    // optimizers' state.
    if (optimizer_stepped_)
      throw std::logic_error(
          "CancelStep thrown after next() stepped the optimizer, which cannot be taken back; "
          "throw it before calling next()");
    throw;
  }
  p_.stages.run_stage(Stage::zero_grad);
  current_opt = 0;
  return stepped;
}

void StepEngine::zero_grad_optimizer(std::size_t i) {
  PhaseTimer t(step_profiler(), Profiler::optimizer);
  current_opt = i;
  p_.stages.run_stage(Stage::zero_grad);
  current_opt = 0;
}

// The forward stage (the task's forward, wrapped by handlers), after_pred, the task's loss,
// after_loss: what training and validation steps share.
void StepEngine::forward_and_loss() {
  Profiler* prof = step_profiler();  // training steps only
  output = Output{};
  extras.clear();
  // The first training step's matrix products and convolutions (forward and loss; the
  // backward is counted as twice the forward, as is usual).
  const bool count = in_step(p_.loop.phase) && p_.flops.counting() && !manual;
  {
    PhaseTimer t(prof, Profiler::forward);
    std::optional<FlopCounter> c;
    if (count) c.emplace();
    p_.stages.run_stage(Stage::forward);
    if (c) p_.flops.take(*c);
  }
  if (!output.pred.defined())
    throw std::runtime_error("the task's forward() returned no prediction");
  {
    PhaseTimer t(prof, Profiler::hooks);
    p_.stages.emit(Point::after_pred);
  }
  {
    PhaseTimer t(prof, Profiler::loss);
    std::optional<FlopCounter> c;
    if (count) c.emplace();
    p_.stages.set_where("the task's loss()");
    at::Tensor pred = output.pred;
    Output o = p_.task->loss(p_.ctx, pred, batch);
    output.loss = std::move(o.loss);
    output.metrics = std::move(o.metrics);
    if (c) p_.flops.take(*c);
  }
  // train/NAME and valid/NAME: one named loss would replace the loss's own values (what the
  // summary, a best checkpoint and early stopping read).
  for (const auto& m : output.metrics)
    if (m.first == "loss" || m.first.empty())
      throw std::runtime_error("the task's loss() returned a metric named '" + m.first + "'" +
                               (m.first.empty()
                                    ? std::string(", which is no column")
                                    : ", which would replace train/loss and valid/loss") +
                               "; give it another name");
  if (count) p_.flops.step_counted(/*with_backward=*/true, p_.state.micro_step + 1);
  if (!output.loss.defined()) throw std::runtime_error("the task's loss() returned no loss");
  // Shapes are known on the host: no sync. Backward needs one value to differentiate.
  if (output.loss.numel() != 1) {
    std::string shape;
    for (const auto d : output.loss.sizes())
      shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw std::runtime_error("the task's loss() returned a tensor of shape [" + shape +
                             "], not one value; reduce it (e.g. its .mean()) before returning");
  }
  PhaseTimer t(prof, Profiler::hooks);
  p_.stages.emit(Point::after_loss);
}

// A second pass for an optimizer_step handler (SAM): the step's output is put back after it.
at::Tensor StepEngine::recompute_loss() {
  struct Restore {
    StepEngine& e;
    Output first;
    std::vector<std::pair<std::string, at::Tensor>> first_extras;
    ~Restore() {
      e.output = std::move(first);
      e.extras = std::move(first_extras);
      e.p_.loop.phase = LoopPhase::step;
    }
  } restore{*this, std::move(output), std::move(extras)};
  p_.loop.phase = LoopPhase::recompute;
  forward_and_loss();
  at::Tensor loss = output.loss;
  {
    PhaseTimer t(step_profiler(), Profiler::backward);
    p_.stages.set_where("the backward pass of Context::recompute_loss()");
    BackwardHere here;
    loss.backward();
  }
  return loss.detach();
}

void StepEngine::train_step(BatchSource& loader) {
  Profiler* prof = p_.stages.profiler();
  const auto t_step = prof ? prof->step_start() : Profiler::StepStart{};
  p_.state.batch_size = loader.size_of(p_.state.batch_idx);
  p_.state.stepped = false;
  if (p_.times.first_step_s < 0) p_.times.first_step_s = process_age_seconds();
  {
    PhaseTimer t(prof, Profiler::hooks);
    p_.stages.emit(Point::before_step);
  }
  // Before any work of the step: a stop or failure at before_step leaves the weights whole,
  // for a checkpoint at after_cancel and model.pt.
  p_.loop.phase = LoopPhase::step;
  {
    // The batch is drawn after before_step: a checkpoint taken there holds nothing of it.
    PhaseTimer t(prof, Profiler::data);
    p_.stages.set_where("the training data's get()");
    Loaded got = loader.take(p_.state.batch_idx);
    if (got.state) p_.loop.data_state = std::move(got.state);
    batch = to_device(std::move(got.batch));
  }
  skip_batch_ = false;
  loss_kept_ = false;
  optimizer_stepped_ = false;  // for the whole step: several optimizers step in it
  // Weights' bf16 copies that something changed since the optimizer wrote them are cast again
  // before the forward: a replayed CUDA graph reads them without asking.
  bf16_copies::refresh();
  if (manual) {
    // The task runs backward and steps itself, through the Context (same stage chains).
    // Profiled, its time less its backward and steps (phases of their own) counts as forward.
    {
      PhaseTimer t(prof, Profiler::forward);
      p_.stages.set_where("the task's train_step()");
      // Under manual optimization the first step's ops are counted as the task runs them,
      // its backward included.
      std::optional<FlopCounter> c;
      if (p_.flops.counting()) c.emplace();
      output = p_.task->train_step(p_.ctx, batch);
      if (c) {
        p_.flops.take(*c);
        c.reset();
        p_.flops.step_counted(/*with_backward=*/false, p_.state.micro_step + 1);
      }
    }
    PhaseTimer t(prof, Profiler::hooks);
    p_.stages.emit(Point::after_pred);
    p_.stages.emit(Point::after_loss);
  } else {
    // A gradients handler that skips the batch (returns without next()) leaves no output: not
    // the previous step's, which the records would count again.
    output = Output{};
    extras.clear();
    p_.stages.run_stage(Stage::gradients);
    // One backward, then each optimizer's step (several: one per module) through its chain.
    for (std::size_t i = 0; i < p_.optimizers.size(); ++i)
      if (step_optimizer(i)) p_.state.stepped = true;
  }
  // A step whose gradients came without backward() (a replayed CUDA graph) is checked by its
  // loss.
  if (p_.opt.nan_policy == NanPolicy::error && !loss_kept_ && output.loss.defined() &&
      !cuda::capturing(p_.device))
    loss_check.add(output.loss, {p_.state.epoch, p_.state.batch_idx, p_.state.optimizer_step, ""});
  if (p_.state.stepped) ++p_.state.optimizer_step;
  if (skip_batch_) {
    ++p_.state.skipped_steps;
  } else {
    if (output.loss.defined()) p_.epoch.add_loss(output.loss, p_.state.batch_size);
    for (const auto& [k, v] : output.metrics) p_.epoch.add_metric(k, v, p_.state.batch_size);
  }
  ++p_.state.micro_step;
  p_.state.samples_seen += p_.state.batch_size * p_.state.num_processes;
  p_.times.samples_this_run += p_.state.batch_size * p_.state.num_processes;
  // The step's record is written before after_step, so that a hook there (a checkpoint) sees
  // the step complete, its record included.
  {
    PhaseTimer t(prof, Profiler::records);
    p_.stages.set_where("the step's record");  // the losses it reads, the file it appends to
    p_.log_step_if_due();
  }
  p_.loop.phase = LoopPhase::fit;
  p_.loop.pos = {p_.state.epoch, p_.state.batch_idx + 1};
  {
    PhaseTimer t(prof, Profiler::hooks);
    try {
      p_.stages.emit(Point::after_step);
    } catch (const Cancel&) {
      throw;  // a hook's stop (CancelFit): the step's work is done
    } catch (...) {
      // A hook failed here before the hooks after it saw the step: it is not finished, and no
      // failure checkpoint may claim it is (nor may model.pt). Thrown by the last, it is.
      if (p_.stages.left_unrun(Point::after_step)) p_.loop.phase = LoopPhase::step;
      throw;
    }
  }
  if (prof) prof->add_step(t_step);
}

}  // namespace wick
