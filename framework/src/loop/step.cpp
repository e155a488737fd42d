// The step engine: a training step (before_step to after_step), the stage chains' defaults,
// backward and the optimizers' steps (the task drives them under manual optimization), the
// second pass of Context::recompute_loss, and the forward and loss that validation shares.
#include <optional>

#include "cuda/cuda_support.hpp"
#include "loop/trainer_impl.hpp"
#include "wick/system.hpp"

namespace wick {

namespace {

struct Interrupted {};

// Whether a scalar loss is finite. On the CPU the value is read in place: item() goes through
// the dispatcher and costs about a microsecond per step (measured by wick_bench); on a GPU it
// is the device sync that nan_policy needs anyway.
bool loss_is_finite(const at::Tensor& loss) {
  if (loss.device().is_cpu() && loss.numel() == 1 && loss.layout() == at::kStrided) {
    if (loss.scalar_type() == at::kFloat) return std::isfinite(*loss.data_ptr<float>());
    if (loss.scalar_type() == at::kDouble) return std::isfinite(*loss.data_ptr<double>());
  }
  return std::isfinite(loss.item<double>());
}

}  // namespace

// The defaults at the end of each stage chain.
void Trainer::Impl::install_stage_defaults() {
  Impl* impl = this;
  dispatch.set_terminal(Stage::forward, [impl](Context& c) {
    impl->output.pred = impl->task->forward(c, impl->batch);
    return true;
  });
  dispatch.set_terminal(Stage::backward, [](Context& c) {
    c.backward_loss().backward();
    return true;
  });
  dispatch.set_terminal(Stage::gradients, [impl](Context&) {
    impl->forward_and_loss();
    impl->backward(impl->output.loss, 0);
    return true;
  });
  dispatch.set_terminal(Stage::optimizer_step, [impl](Context&) {
    impl->optim().step();
    return true;
  });
  // Gradients are set to none rather than zeroed: less memory traffic, same result.
  dispatch.set_terminal(Stage::zero_grad, [impl](Context&) {
    for (auto& group : impl->optim().param_groups())
      for (auto& p : group.params()) p.mutable_grad() = at::Tensor();
    return true;
  });
}

Batch Trainer::Impl::to_device(Batch b) const {
  if (device.is_cpu()) return b;
  // From page-locked memory (LoadPlan::pin) on a copy stream: overlapped with the previous
  // step's work still running on the GPU. Predict's inputs have no target (undefined stays so).
  b.input = cuda::to_device_async(b.input, device);
  b.target = cuda::to_device_async(b.target, device);
  return b;
}

// The calls of a task's train_step under manual optimization, and of an optimizer_step
// handler's second pass, each refused outside its place.
void Trainer::Impl::check_manual_call(const char* call) const {
  if (!manual || !in_step() || !state.training())
    throw std::logic_error(std::string("Context::") + call +
                           " is for a task's train_step under manual optimization "
                           "(Task::manual_optimization() returning true)");
}
void Trainer::Impl::manual_backward(const at::Tensor& loss, std::string_view optimizer) {
  check_manual_call("backward");
  backward(loss, optimizer_index(optimizers, optimizer));
}
bool Trainer::Impl::manual_step(std::string_view optimizer) {
  check_manual_call("step");
  const bool stepped = step_optimizer(optimizer_index(optimizers, optimizer));
  if (stepped) state.stepped = true;
  return stepped;
}
void Trainer::Impl::manual_zero_grad(std::string_view optimizer) {
  check_manual_call("zero_grad");
  zero_grad_optimizer(optimizer_index(optimizers, optimizer));
}
at::Tensor Trainer::Impl::handler_recompute_loss() {
  if (manual || phase != LoopPhase::step || !state.training())
    throw std::logic_error(
        "Context::recompute_loss is for an optimizer_step handler of a training step (not "
        "under manual optimization, not inside another recompute_loss)");
  return recompute_loss();
}

void Trainer::Impl::backward(const at::Tensor& loss, std::size_t i) {
  // While a CUDA graph captures the step, nothing may wait for the GPU: cuda_graph checks the
  // loss of each replay itself.
  if (opt.nan_policy != NanPolicy::ignore && !cuda::capturing(device) && !loss_is_finite(loss)) {
    if (opt.nan_policy == NanPolicy::error)
      throw std::runtime_error(
          "non-finite loss (" + std::to_string(loss.item<double>()) + ")" +
          (optimizers.size() > 1 ? " for optimizer '" + optimizers[i].name + "'" : "") +
          " at epoch " + std::to_string(state.epoch) + ", batch " +
          std::to_string(state.batch_idx) + ", optimizer step " +
          std::to_string(state.optimizer_step) +
          "; set trainer.nan_policy = \"skip\" to skip such steps");
    skip_batch = true;
    return;
  }
  current_opt = i;
  backward_loss = loss;
  {
    PhaseTimer t(step_profiler(), Profiler::backward);
    dispatch.run_stage(Stage::backward);
  }
  {
    PhaseTimer t(step_profiler(), Profiler::hooks);
    dispatch.emit(Point::after_backward);
  }
  current_opt = 0;
}

bool Trainer::Impl::step_optimizer(std::size_t i) {
  PhaseTimer t(step_profiler(), Profiler::optimizer);
  current_opt = i;
  const bool stepped = !skip_batch && dispatch.run_stage(Stage::optimizer_step);
  dispatch.run_stage(Stage::zero_grad);
  current_opt = 0;
  return stepped;
}

void Trainer::Impl::zero_grad_optimizer(std::size_t i) {
  PhaseTimer t(step_profiler(), Profiler::optimizer);
  current_opt = i;
  dispatch.run_stage(Stage::zero_grad);
  current_opt = 0;
}

// The forward stage (the task's forward, wrapped by handlers), after_pred, the task's loss,
// after_loss: what training and validation steps share.
void Trainer::Impl::forward_and_loss() {
  Profiler* prof = step_profiler();  // training steps only
  output = Output{};
  // The first training step's matrix products and convolutions (forward and loss; the
  // backward is counted as twice the forward, as is usual).
  const bool count = in_step() && flops.counting() && !manual;
  {
    PhaseTimer t(prof, Profiler::forward);
    std::optional<FlopCounter> c;
    if (count) c.emplace();
    dispatch.run_stage(Stage::forward);
    if (c) flops.take(*c);
  }
  if (!output.pred.defined())
    throw std::runtime_error("the task's forward() returned no prediction");
  {
    PhaseTimer t(prof, Profiler::hooks);
    dispatch.emit(Point::after_pred);
  }
  {
    PhaseTimer t(prof, Profiler::loss);
    std::optional<FlopCounter> c;
    if (count) c.emplace();
    dispatch.set_where("the task's loss()");
    at::Tensor pred = output.pred;
    Output o = task->loss(ctx, pred, batch);
    output.loss = std::move(o.loss);
    output.metrics = std::move(o.metrics);
    if (c) flops.take(*c);
  }
  if (count) flops.step_counted(/*with_backward=*/true, state.micro_step + 1);
  if (!output.loss.defined()) throw std::runtime_error("the task's loss() returned no loss");
  PhaseTimer t(prof, Profiler::hooks);
  dispatch.emit(Point::after_loss);
}

// A second pass for an optimizer_step handler (SAM): the step's output is put back after it.
at::Tensor Trainer::Impl::recompute_loss() {
  struct Restore {
    Impl& I;
    Output first;
    ~Restore() {
      I.output = std::move(first);
      I.phase = LoopPhase::step;
    }
  } restore{*this, std::move(output)};
  phase = LoopPhase::recompute;
  forward_and_loss();
  at::Tensor loss = output.loss;
  {
    PhaseTimer t(step_profiler(), Profiler::backward);
    dispatch.set_where("the backward pass of Context::recompute_loss()");
    loss.backward();
  }
  return loss.detach();
}

void Trainer::Impl::train_step(BatchLoader& loader) {
  Profiler* prof = dispatch.profiler();
  const auto t_step = prof ? Profiler::Clock::now() : Profiler::Clock::time_point{};
  state.batch_size = loader.size_of(state.batch_idx);
  state.stepped = false;
  phase = LoopPhase::step;
  if (times.first_step_s < 0) times.first_step_s = process_age_seconds();
  {
    PhaseTimer t(prof, Profiler::hooks);
    dispatch.emit(Point::before_step);
  }
  {
    // The batch is drawn after before_step: a checkpoint taken there holds nothing of it.
    PhaseTimer t(prof, Profiler::data);
    dispatch.set_where("the training data's get()");
    Loaded got = loader.take(state.batch_idx);
    if (got.state) data_state = std::move(got.state);
    batch = to_device(std::move(got.batch));
  }
  skip_batch = false;
  if (manual) {
    // The task runs backward and steps itself, through the Context (same stage chains).
    // Profiled, its time less its backward and steps (phases of their own) counts as forward.
    {
      PhaseTimer t(prof, Profiler::forward);
      dispatch.set_where("the task's train_step()");
      // Under manual optimization the first step's ops are counted as the task runs them,
      // its backward included.
      std::optional<FlopCounter> c;
      if (flops.counting()) c.emplace();
      output = task->train_step(ctx, batch);
      if (c) {
        flops.take(*c);
        c.reset();
        flops.step_counted(/*with_backward=*/false, state.micro_step + 1);
      }
    }
    PhaseTimer t(prof, Profiler::hooks);
    dispatch.emit(Point::after_pred);
    dispatch.emit(Point::after_loss);
  } else {
    dispatch.run_stage(Stage::gradients);
    // One backward, then each optimizer's step (several: one per module) through its chain.
    for (std::size_t i = 0; i < optimizers.size(); ++i)
      if (step_optimizer(i)) state.stepped = true;
  }
  if (state.stepped) ++state.optimizer_step;
  if (skip_batch) {
    ++state.skipped_steps;
  } else {
    if (output.loss.defined()) epoch.losses.push_back(output.loss.detach());
    for (const auto& [k, v] : output.metrics) epoch.add_metric(k, v);
  }
  ++state.micro_step;
  state.samples_seen += state.batch_size * state.num_processes;
  times.samples_this_run += state.batch_size * state.num_processes;
  // The step's record is written before after_step, so that a hook there (a checkpoint) sees
  // the step complete, its record included.
  {
    PhaseTimer t(prof, Profiler::records);
    log_step_if_due();
  }
  phase = LoopPhase::fit;
  pos = {state.epoch, state.batch_idx + 1};
  {
    PhaseTimer t(prof, Profiler::hooks);
    dispatch.emit(Point::after_step);
  }
  if (prof) prof->add_step(Profiler::since(t_step));
}

}  // namespace wick
