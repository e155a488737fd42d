// The fit loop: a fit's start (the output folder, before_fit and the resume it may restore),
// its epochs (training, validation, the epoch's record and after_epoch, the stops between
// them), how an exception ends it, and its end, which runs however it ended (after_cancel,
// the last records, the final weights, summary.json). Trainer::fit (trainer.cpp) runs them.
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cuda/cuda_support.hpp"
#include "loop/trainer_impl.hpp"
#include "optim/bf16_copies.hpp"
#include "optim/optimizers.hpp"  // check_trainable
#include "system/error_text.hpp"
#include "wick/params.hpp"  // ConfigError
#include "wick/system.hpp"  // warn_if_reference_blas, make_current

namespace wick {

namespace fs = std::filesystem;

std::shared_ptr<void> Trainer::Impl::start_fit() {
  check_trainable(*model, optim_specs.empty() ? std::string() : optim_specs[0].where);
  times.fit_start = Clock::now();
  make_current(run.device);  // this thread's calls naming no GPU reach the run's
  stops.start(opt.epochs, opt.max_steps);
  loop.phase = LoopPhase::fit;
  dispatch.set_where("start");
  lock_outputs();  // before anything in the output folder is written
  self->connect();
  std::shared_ptr<void> memory_counting;
  if (auto* p = dispatch.profiler()) {
    memory_counting = p->memory.start(cpu_tensor_bytes(*model));
    // On a GPU the host only queues the steps' work: their phases are timed on the device,
    // unless a hook asked for the host's time (ProfileClock::host).
    if (device.is_cuda() && p->clock() == ProfileClock::device)
      p->use_device_clock(cuda::event_clock(device));
  }
  warn_if_reference_blas();
  open_outputs();
  write_summary_file(nullptr);
  dispatch.set_where("before_fit");
  loop.resume.begin_fit();
  note_group_layout();
  loop.phase = LoopPhase::before_fit;  // where a checkpoint may be restored
  dispatch.emit(Point::before_fit);
  loop.phase = LoopPhase::fit;
  check_resumed_accumulation();
  // "--resume auto" with nothing to resume from (a restart before the first checkpoint):
  // a fresh start, so what the failed attempt logged is dropped.
  const bool fresh_auto = run.resume == "auto" && !loop.resume.resumed();
  if (fresh_auto) {
    loop.resume.start_afresh();
    if (state.is_main_process())
      std::fprintf(stderr,
                   "wick: --resume auto: no checkpoint was restored (none yet, or no "
                   "checkpoint hook); training from the start\n");
  }
  if (const auto& to = loop.resume.rewind_records()) {
    if (opt.write_outputs) {
      dispatch.set_where("rewinding the metrics records to the checkpoint");
      records.rewind(fs::path(run.output_dir) / "metrics.jsonl", *to,
                     /*truncate=*/state.is_main_process());
    } else {
      records.set_count(*to);
    }
  }
  dp.check_fit();
  if (dp.distributed())
    steps.loss_check.agree_over_ranks(dp.rank(), dp.world(),
                                      [this](at::Tensor& t) { dp.all_reduce_sum(t); });
  if (!run.resume.empty() && !loop.resume.resumed() && !fresh_auto)
    throw std::runtime_error("--resume " + run.resume +
                             " was given but no hook restored a checkpoint; enable one with "
                             "[[hooks]] plugin = \"checkpoint\"");
  return memory_counting;
}

void Trainer::Impl::run_epochs() {
  // Resumed, with the same limits, from a checkpoint a stop signal wrote before the loop could
  // act on a hook's stop request (early stopping): the uninterrupted run ended there.
  if (stops.restored) {
    if (state.is_main_process())
      std::fprintf(stderr, "wick: the checkpoint's run was stopping (%s): nothing more to train\n",
                   stops.reason.c_str());
    return;
  }
  for (std::int64_t e = loop.resume.first_epoch(); e < opt.epochs; ++e) {
    state.epoch = e;
    const EpochClock epoch_start{Clock::now(), times.samples_this_run, flops.probe_seconds()};
    const bool whole = train_epoch(loop.resume.first_batch(e));
    stop_if_interrupted();
    {
      PhaseTimer t(dispatch.profiler(), Profiler::validation);
      const auto whole = dp.whole(DataParallel::Whole::weights);  // gathered when sharded
      eval.last_valid = eval.validation(valid_ds.get());
    }
    // Stopped before the epoch's last batch (max_steps, a stop request): the epoch is not
    // over. Its validation goes to the summary, but no epoch record is written and
    // after_epoch does not fire; the position stays at the next batch, where a resume
    // continues exactly, as after a SIGINT.
    if (!whole) return;
    write_epoch_record(epoch_start);
    loop.pos = {e + 1, 0};
    note_progress(/*checkpoint=*/false);  // the epoch counted
    dispatch.emit(Point::after_epoch);
    records.commit();  // with what hooks logged at after_epoch
    state.batch_idx = 0;
    // A Ctrl-C during validation or after_epoch (the last epoch's included) still counts.
    stop_if_interrupted();
    if (agreed_stop(true)) return;
  }
}

bool Trainer::Impl::agreed_stop(bool epoch_end, bool window_end) {
  const bool signalled = dp.distributed() && window_end && interrupt_requested();
  stops.acted = dp.agree_stop(stops.requested || signalled, epoch_end);
  // The ranks stop here together; whether for a signal is asked then, not at every step.
  if (stops.acted && dp.distributed()) stop_if_interrupted();
  return stops.acted;
}

void Trainer::Impl::stop_if_interrupted() {
  if (!dp.distributed()) {
    if (interrupt_requested()) throw Interrupted{};
    return;
  }
  const auto [rank, sig] = dp.first_signal(interrupt_signal());
  if (sig == 0) return;
  adopt_interrupt(sig);  // another rank's: this one ends with it too (the same exit status)
  stops.signal_rank = rank;
  stops.acted = false;  // the ranks stop for the signal: a hook's request stays pending
  throw Interrupted{};
}

void Trainer::Impl::fit_ended_by(const std::exception_ptr& error, FitResult& res,
                                 CancelInfo& ending) {
  auto end_with = [&](FitResult::Status st, CancelReason why, std::string msg) {
    res.status = st;
    (st == FitResult::Status::failed ? res.error : res.stop_reason) = msg;
    ending = {CancelScope::fit, why, std::move(msg)};
  };
  try {
    std::rethrow_exception(error);
  } catch (const CancelFit&) {
    end_with(FitResult::Status::cancelled, CancelReason::cancel_fit, dispatch.blame("CancelFit"));
  } catch (const Interrupted&) {
    res.signal = interrupt_signal();
    const auto rank = stops.signal_rank;
    end_with(FitResult::Status::cancelled, CancelReason::interrupt,
             stop_signal_reason(res.signal) +
                 (rank >= 0 ? " on rank " + std::to_string(rank) : std::string()));
  } catch (const Cancel& c) {
    // A CancelStep or CancelEpoch thrown outside its scope (e.g. in before_fit) ends the fit.
    end_with(FitResult::Status::cancelled, CancelReason::cancel_fit, dispatch.blame(c.what()));
  } catch (const ConfigError& e) {
    // Every configuration error exits 2, whichever layer finds it.
    end_with(FitResult::Status::failed, CancelReason::failure, dispatch.blame(e.what()));
    res.config_error = true;
  } catch (const c10::Error& e) {
    // LibTorch's message without its C++ backtrace, in summary.json and on stderr alike.
    end_with(FitResult::Status::failed, CancelReason::failure,
             dispatch.blame(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    end_with(FitResult::Status::failed, CancelReason::failure, dispatch.blame(e.what()));
  } catch (...) {
    end_with(FitResult::Status::failed, CancelReason::failure,
             dispatch.blame("an exception that is not a std::exception (a plugin threw a "
                            "non-standard type)"));
  }
}

void Trainer::Impl::end_fit(FitResult& res, const CancelInfo& ending) {
  // Each step of the end runs whatever the ones before it did; a failure makes the run failed.
  auto failed = [&](const std::string& msg) {
    res.status = FitResult::Status::failed;
    const auto text = without_backtraces(msg);
    res.error = res.error.empty() ? text : res.error + "; then " + text;
  };
  // A before_fit hook that threw leaves the loop out of before_fit: after_cancel restores nothing.
  if (loop.phase == LoopPhase::before_fit) loop.phase = LoopPhase::fit;
  if (res.status != FitResult::Status::completed) {
    // after_cancel runs once on the way out; an error inside it is reported, not rethrown.
    stops.cancel = &ending;
    try {
      // An epoch record still open (a cancel in after_epoch) is written first: a checkpoint
      // saved at after_cancel counts it.
      records.commit();
      dispatch.emit(Point::after_cancel);
    } catch (const std::exception& e) {
      failed(dispatch.blame(e.what()));
    } catch (...) {
      failed(dispatch.blame("an exception that is not a std::exception"));
    }
    stops.cancel = nullptr;
  }
  dispatch.set_where("end");
  try {
    close_records();
  } catch (const std::exception& e) {
    failed(e.what());
  }
  const bool ended_in_step = in_step();  // the weights may be half updated
  loop.phase = LoopPhase::outside;
  // Sharded weights are gathered (collectively) where every rank ends at this point, a stop
  // signal's agreed step, and held through the summary, whose fingerprint is model.pt's. A
  // completed fit holds them whole already (fit()).
  std::optional<DataParallel::WholeState> whole;
  try {
    if (ending.reason == CancelReason::interrupt && !dp.weights_whole() &&
        final_weights_due(res, ended_in_step))
      whole.emplace(dp, DataParallel::Whole::weights);
    save_final_weights(res, ended_in_step);
  } catch (const std::exception& e) {
    failed(e.what());  // the trained weights could not be kept: not a success
  }
  try {
    write_summary_file(&res);
  } catch (const std::exception& e) {
    // The run's record of itself could not be written: it must not look like a success.
    failed(e.what());
    std::fprintf(stderr, "wick: %s\n", e.what());
  }
  bf16_copies::release(model->parameters());
  lock.release();
}

}  // namespace wick
