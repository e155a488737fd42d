// Private: the Trainer's composition root. Impl holds what the run is (options, task, model,
// optimizers, data, device), the counters every component shares (StepState), where the loop
// is (LoopPlace: phase, position, resume point, the epoch's dealing, the data's state), and
// the components, each owning its own state: the Dispatcher (dispatch.hpp), StepEngine
// (step_engine.hpp, with its LossCheck), Evaluator (evaluator.hpp), EpochValues, StopRequests,
// FlopMeter, RunTimes, RecordWriter and RunLock (records/), DataParallel (dist/). It builds
// them, binds each to the parts of the others it works with, and runs the fit over them: the
// orchestration is its only job, which is why the loop's files are its methods:
//   trainer.cpp       construction, accessors, fit(): its three phases in order
//   fit_loop.cpp      a fit's start (before_fit, a resume), its epochs, its end
//   epoch.cpp         a training epoch: its batches (the dealing of the order), its steps
//   run_outputs.cpp   the run folder: lock, metrics records, summary.json
//   final_weights.cpp the weights a run leaves (model.pt) and loading them
//   checkpoints.cpp   the run's checkpoints: save, inspect, restore (the CheckpointStore)
// and the components' work is theirs: step.cpp (a training step, the stage chains' defaults,
// backward and optimizer steps, recompute_loss), evaluate.cpp (validation with metric
// reduction, evaluate, predict). Every cancellable scope runs through run_scope (scope.hpp).
// The Context reaches the loop through Context::Host (context_host.hpp), a view of these
// members, of the step engine and of the CheckpointStore that Impl implements.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/batch_loader.hpp"
#include "data/sampler.hpp"
#include "dist/data_parallel.hpp"
#include "loop/context_host.hpp"
#include "loop/epoch_values.hpp"
#include "loop/evaluator.hpp"
#include "loop/flop_meter.hpp"
#include "records/run_lock.hpp"
#include "state/snapshot.hpp"
#include "wick/metric.hpp"
#include "wick/outputs.hpp"
#include "wick/task.hpp"
#include "wick/trainer.hpp"

namespace wick {

// Hidden, as its declaration in wick/trainer.hpp says.
struct Trainer::Impl final : CheckpointStore {
  Trainer* self = nullptr;
  // What the run is: its options, task, model, optimizers, data, device.
  TrainerOptions opt;
  std::vector<OptimizerOptions> optim_specs;
  RunInfo run;
  std::shared_ptr<Task> task;
  std::shared_ptr<torch::nn::Module> model;
  std::vector<NamedOptimizer> optimizers;
  std::shared_ptr<Dataset> train_ds, valid_ds;
  std::shared_ptr<TensorDataset> train_on_device;  // trainer.data_on_device on CUDA, else null
  torch::Device device{torch::kCPU};

  // Where the loop is (loop_state.hpp), and the run's name.
  StepState state;
  LoopPlace loop;
  std::string run_id = new_run_id();  // RunIdentity::id; a resume adopts its checkpoint's

  // What plugins reach: the Context over a view of this state (context_host.hpp; it binds
  // members declared below), and the dispatcher that runs their hooks with it.
  Context::Host host{state,   run,      loop,  model, task, optimizers, steps,
                     records, dispatch, times, stops, dp,   *this};
  Context ctx{&host};
  Dispatcher dispatch{ctx};

  // The step engine, which owns the running step's values (after the dispatcher: they are
  // released before the hooks' libraries may be).
  DispatcherPort dispatch_port{dispatch};  // the dispatcher as the components see it
  StepEngine steps{{opt, device, dispatch_port, ctx, task, optimizers, state, loop, flops, times,
                    epoch, [this] { log_step_if_due(); }}};

  // The evaluator, which owns the [[metrics]] and the last validation's values.
  DataParallelRanks eval_ranks{dp};
  Evaluator eval{{opt, run, device, model, valid_ds, state, dispatch_port, steps, eval_ranks,
                  [this](CancelScope s) { cancelled(s); },
                  [this] { return in_fit() && writes_outputs() && lock.held(); }}};

  // The run's outputs and measures.
  RecordWriter records;
  RunLock lock;  // the output folder, held by rank 0 for the length of a fit
  EpochValues epoch;
  FlopMeter flops;
  RunTimes times;
  StopRequests stops;

  // The job's ranks and what reaches them: a hook's collectives (or wick's own outside a
  // fit), a data-parallel plugin's sharded optimizer state.
  DataParallel dp;
  bool fit_begun = false;      // a Trainer runs one fit (Trainer::fit)
  std::string weights_loaded;  // Trainer::weights_loaded()
  std::string threads_why;     // trainer.threads = "auto": why that count (wick::auto_threads)

  bool in_step() const { return wick::in_step(loop.phase); }
  bool in_fit() const { return loop.phase != LoopPhase::outside; }

  // ---- the fit loop (fit_loop.cpp) ----
  // Up to before_fit's end: the output folder, before_fit, a resume's records; returns what
  // keeps a profiled fit's memory counted while it runs.
  std::shared_ptr<void> start_fit();
  // The epochs from the resume point: training, validation, records, after_epoch, stops.
  void run_epochs();
  // What ended the fit (a cancel, an interrupt, an error): into res and after_cancel's info.
  void fit_ended_by(const std::exception_ptr& error, FitResult& res, CancelInfo& ending);
  // However the fit ended: after_cancel if it did not complete, the last records, the final
  // weights, summary.json, the output folder released. A failure here fails the run.
  void end_fit(FitResult& res, const CancelInfo& ending);

  // ---- a training epoch (epoch.cpp) ----
  Sharding sharding() const;
  std::int64_t train_batches() const;  // batches of a training epoch on this rank
  // The same for an epoch dealt from `start` on `world` ranks at batch size bs.
  std::int64_t train_batches(EpochStart start, std::int64_t world, std::int64_t bs,
                             bool drop_last) const;
  bool streaming() const { return train_ds->size() == kUnsized; }
  LoadPlan train_plan(std::int64_t first_batch);  // the current epoch's training batches
  // Whether the epoch ran to its end (false: a stop came before its last batch).
  bool train_epoch(std::int64_t first_batch);
  void cancelled(CancelScope scope);
  // Whether a stop requested on any rank stops the fit here, agreed on by the ranks. With
  // several ranks a stop signal counts as a request where an accumulation window ends
  // (`window_end`): no rank holds gradients of its own there, which rank 0's cancel checkpoint
  // would lose. Throws Interrupted when a signal stops the ranks, on every rank at this step.
  bool agreed_stop(bool epoch_end, bool window_end = true);
  // A stop signal ends the fit here: this process's or, with several ranks, any rank's (a
  // collective, so that every rank ends at the same point). Throws Interrupted.
  void stop_if_interrupted();

  // ---- the run's outputs (run_outputs.cpp) ----
  bool writes_outputs() const;  // this process writes the run folder (rank 0)
  void lock_outputs();
  void open_outputs();
  void log_step_if_due();
  // Staged: open to the values hooks log through after_epoch (RecordWriter::stage).
  // Where an epoch's timings start from: its start, the samples trained before it this run,
  // and the peak probe's seconds so far (which count in no rate).
  struct EpochClock {
    Clock::time_point t;
    std::int64_t samples;
    double probe_s;
  };
  void write_epoch_record(const EpochClock& start);
  // At the end of a fit: the epoch record if still open, then a step record for the values
  // hooks logged after the last record (after_fit, after_cancel), which summary.json keeps.
  void close_records();
  std::vector<std::pair<std::string, double>> end_values;
  // Means of the epoch's values from the logged marks on (or all of them), over all ranks.
  std::vector<std::pair<std::string, double>> train_means(bool whole_epoch);
  double current_lr() const;
  void lrs_into(std::vector<std::pair<std::string, double>>& out) const;
  std::vector<std::pair<std::string, double>> step_lrs;  // the last step's, from the step
  void add_lrs(Record& r) const;
  Summary summary_now(const FitResult* res);
  void write_summary_file(const FitResult* res);
  void arm_crash_summary(std::optional<Summary> now = std::nullopt);
  // summary.json's "running" counts, and the crash report's, as of the last checkpoint or
  // epoch's end.
  void note_progress(bool checkpoint);

  // ---- checkpoints (checkpoints.cpp) ----
  // The run's parts as a snapshot saves and restores them (state/snapshot.hpp).
  SnapshotParts snapshot_parts();
  CheckpointInfo save_checkpoint(const std::string& folder, const std::string& reason) override;
  // The optimizers' parameter groups as built, before any hook runs: a checkpoint of others
  // could not be resumed.
  void note_group_layout();
  std::string groups_at_start;
  CheckpointInfo inspect_checkpoint(const std::string& folder) const override;
  CheckpointInfo restore_checkpoint(const std::string& folder) override;
  // After before_fit, once grad_accum has set this run's count: refuses a resume inside an
  // accumulation window whose count changed; notes a change between windows.
  void check_resumed_accumulation() const;

  // ---- the weights a run leaves (final_weights.cpp) ----
  // The weights a hook keeps for evaluation, from the first hook (SDK 2.5 or newer) that
  // offers some, and its word for them; "" when none does.
  std::string eval_weights(NamedTensors& out) const;
  // When the fit has ended: rank 0 writes output_dir/model.pt (the evaluation weights a hook
  // offers, else the trained ones) if the weights are whole (the fit did not end inside a
  // step) and something was trained or restored; notes it in res.
  // Whether a fit ending so keeps its final weights (model.pt): not after a failure inside a
  // step, a fresh fit that took no step, a resume that trained nothing and did not complete,
  // or steps from a non-finite loss. The same on every rank.
  bool final_weights_due(const FitResult& res, bool ended_in_step) const;
  void save_final_weights(FitResult& res, bool ended_in_step);
};

}  // namespace wick
