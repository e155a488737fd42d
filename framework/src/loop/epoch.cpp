// A training epoch: its batches (this rank's share of the epoch's order, or a stream's running
// numbers), the steps over them, the stop checks between steps, and cancellations.
#include "cuda/cuda_support.hpp"
#include "loop/scope.hpp"
#include "loop/trainer_impl.hpp"

#include <cstdint>
#include <functional>

namespace wick {

Sharding Trainer::Impl::sharding() const {
  return {state.num_processes, state.rank};
}

std::int64_t Trainer::Impl::train_batches() const {
  return train_batches(loop.epoch_start, state.num_processes, opt.batch_size, opt.drop_last);
}

std::int64_t Trainer::Impl::train_batches(EpochStart start, std::int64_t world, std::int64_t bs,
                                          bool drop_last) const {
  if (streaming()) return opt.steps_per_epoch;
  const std::int64_t nb = epoch_batches(train_ds->size(), start, world, bs, drop_last);
  return opt.steps_per_epoch > 0 ? std::min(nb, opt.steps_per_epoch) : nb;
}

LoadPlan Trainer::Impl::train_plan(std::int64_t first_batch) {
  LoadPlan p;
  p.ds = train_ds.get();
  p.phase = Phase::train;
  p.seed = opt.seed;
  p.epoch = state.epoch;
  p.first = first_batch;
  p.end = train_batches();
  p.what = "the training data";
  p.pin = device.is_cuda();
  const std::int64_t bs = opt.batch_size;
  if (streaming()) {
    // Running sample numbers, dealt to ranks batch by batch (see wick::kUnsized).
    const std::int64_t e = state.epoch, spe = opt.steps_per_epoch;
    const std::int64_t w = state.num_processes, r = state.rank;
    p.indices = [=](std::int64_t b) {
      return at::arange(((e * spe + b) * w + r) * bs, ((e * spe + b) * w + r + 1) * bs, at::kLong);
    };
    return p;
  }
  at::Tensor order = train_order(opt.seed, state.epoch, train_ds->size(), opt.shuffle, sharding(),
                                 loop.epoch_start.offset);
  if (train_on_device) {
    // The batches are cut from the tensors on the device, by the epoch's order copied there
    // once (asynchronously: no step waits for it).
    p.ds = train_on_device.get();
    p.pin = false;
    order = cuda::to_device_async(cuda::pinned(order), device);
  }
  const std::int64_t local = order.size(0), first = loop.epoch_start.first_batch;
  p.indices = [order, local, bs, first](std::int64_t b) {
    return order.slice(0, (b - first) * bs, std::min(local, (b - first + 1) * bs));
  };
  return p;
}

// A CancelStep or CancelEpoch was caught: count it and tell the after_cancel hooks.
void Trainer::Impl::cancelled(CancelScope scope) {
  const bool step = scope == CancelScope::step;
  ++(step ? stops.cancelled_steps : stops.cancelled_epochs);
  CancelInfo info{scope, step ? CancelReason::cancel_step : CancelReason::cancel_epoch,
                  dispatch.blame(step ? "CancelStep" : "CancelEpoch")};
  if (in_step()) loop.phase = LoopPhase::fit;
  stops.cancel = &info;
  dispatch.emit(Point::after_cancel);
  stops.cancel = nullptr;
}

bool Trainer::Impl::train_epoch(std::int64_t first_batch) {
  model->train();
  state.phase = Phase::train;
  if (first_batch == 0) loop.epoch_start = {};  // a resume's new dealing lasts for its epoch
  const std::int64_t nb = train_batches();
  state.batches_in_epoch = nb;
  loop.whole_epoch_batches =
      train_batches(EpochStart{}, state.num_processes, opt.batch_size, opt.drop_last);
  state.batch_idx = first_batch;
  state.epoch_resumed = first_batch > 0;
  // Resumed mid-epoch: the epoch's earlier values (restored) count in its records as they
  // would have.
  if (!loop.resume.take_mid_epoch(first_batch)) epoch.clear();
  epoch.losses.reserve(static_cast<std::size_t>(nb));
  epoch.loss_samples.reserve(static_cast<std::size_t>(nb));
  loop.pos = {state.epoch, first_batch};

  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  const double probe0 = flops.probe_seconds(), probe_cpu0 = flops.probe_cpu_seconds();
  // The epoch's training time counts however it ends (after the losses' check below, or a
  // stop or failure mid-epoch): the run's samples/s divides every sample it trained by it.
  struct AtExit {
    std::function<void()> run;
    ~AtExit() { run(); }
  } add_time{[&] {
    times.epoch_train_s = seconds_since(t0) - (flops.probe_seconds() - probe0);
    times.train_seconds += times.epoch_train_s;
    times.train_cpu_seconds +=
        process_cpu_seconds() - c0 - (flops.probe_cpu_seconds() - probe_cpu0);
  }};
  flops.start_window(state.micro_step);
  times.epoch_micro0 = state.micro_step;
  // The state the data starts the epoch with (restored, or as the task made it), before any
  // loader thread moves it on.
  if (train_ds->has_state() && !loop.data_state) {
    loop.data_state = std::make_shared<StateDict>();
    train_ds->save_state(*loop.data_state);
  }
  // max_steps is reached at the same step on every rank; other stop requests may come from
  // one rank alone, so data-parallel runs agree on them first.
  auto max_reached = [&] {
    const bool reached = opt.max_steps > 0 && state.optimizer_step >= opt.max_steps;
    if (reached) {
      stops.request("max_steps (" + std::to_string(opt.max_steps) + ") reached");
      stops.acted = true;
    }
    return reached;
  };
  bool whole = true;
  auto on_cancel = [this](CancelScope s) { cancelled(s); };
  run_scope<CancelScope::epoch>(
      [&] {
        dispatch.emit(Point::before_epoch);  // a CancelEpoch here skips this epoch's training
        // Started after before_epoch (hooks there may change the data's state); its threads
        // are joined on every way out of this scope.
        // Batches gathered on the device are cut on the main thread, on its stream.
        BatchLoader loader(train_plan(first_batch), train_on_device ? 0 : opt.num_workers);
        for (std::int64_t b = first_batch; b < nb; ++b) {
          // With several ranks a stop signal is agreed on after a step (agreed_stop), as a
          // signal may reach one rank alone, or each at another step.
          if (!dp.distributed() && interrupt_requested()) throw Interrupted{};
          // Resumed from a stop at max_steps with the same limit: no step past it.
          if (max_reached()) {
            whole = false;
            break;
          }
          // A stop asked for before the epoch's first step (at before_fit or before_epoch)
          // trains no batch of it: agreed on as between epochs (every rank exchanges its
          // request); later ones after each step.
          if (b == first_batch && agreed_stop(/*epoch_end=*/true)) {
            whole = false;
            break;
          }
          state.batch_idx = b;
          const bool stepped = run_scope<CancelScope::step>(
              [&] {
                steps.train_step(loader);
                if (flops.probe_due()) flops.probe(state.micro_step);
              },
              on_cancel);
          if (!stepped) loop.pos = {state.epoch, b + 1};
          if (max_reached() || agreed_stop(false, (b + 1) % state.grad_accum_steps == 0)) {
            whole = b + 1 == nb;
            break;
          }
        }
      },
      on_cancel);
  // The epoch's losses are trusted before its validation, records and after_epoch hooks.
  dispatch.set_where("the end of the epoch's training");
  steps.loss_check.verify();
  return whole;
}

}  // namespace wick
