// Private: the Trainer's state, shared by the files of the loop (trainer.cpp: fit and its
// phases; context.cpp: the services plugins reach through the Context) and of the snapshot
// (state/snapshot.cpp).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "data/batch_loader.hpp"
#include "data/sampler.hpp"
#include "loop/dispatch.hpp"
#include "loop/flops.hpp"
#include "optim/optimizers.hpp"
#include "records/record_writer.hpp"
#include "records/run_lock.hpp"
#include "wick/metric.hpp"
#include "wick/task.hpp"
#include "wick/trainer.hpp"

namespace wick {

using Clock = std::chrono::steady_clock;

// Per-batch values of the current training epoch: detached, not synced until a record needs
// them (no host sync per step).
struct EpochValues {
  std::vector<at::Tensor> losses;
  std::vector<std::string> names;                // Output::metrics of training steps
  std::vector<std::vector<at::Tensor>> metrics;  // [name][step]
  std::size_t logged_loss = 0;                   // values already folded into a step record
  std::vector<std::size_t> logged_metric;

  void clear() {
    losses.clear();
    names.clear();
    metrics.clear();
    logged_loss = 0;
    logged_metric.clear();
  }
  void add_metric(const std::string& name, const at::Tensor& v) {
    std::size_t k = 0;
    while (k < names.size() && names[k] != name) ++k;
    if (k == names.size()) {
      names.push_back(name);
      metrics.emplace_back();
      logged_metric.push_back(0);
    }
    metrics[k].push_back(v.detach());
  }
};

struct Context::Host {
  virtual ~Host() = default;
};

struct Trainer::Impl : Context::Host {
  Trainer* self = nullptr;
  TrainerOptions opt;
  std::vector<OptimizerOptions> optim_specs;
  RunInfo run;
  std::shared_ptr<Task> task;
  std::shared_ptr<torch::nn::Module> model;
  std::vector<NamedOptimizer> optimizers;
  std::size_t current_opt = 0;  // the optimizer the running stage works for
  bool manual = false;          // the task drives backward and steps (manual optimization)
  std::shared_ptr<Dataset> train_ds, valid_ds;
  torch::Device device{torch::kCPU};

  StepState state;
  Context ctx{this};
  Dispatcher dispatch{ctx};
  RecordWriter records;
  std::vector<MetricEntry> metrics;  // [[metrics]]: whole-set values of each validation
  // Per metric, where an error is blamed: "metric 'f1_macro' (plugin 'f1') update" and
  // "... compute" (the dispatcher keeps a view, so they live here).
  std::vector<std::pair<std::string, std::string>> metric_places;
  RunLock lock;  // the output folder, held by rank 0 for the length of a fit
  Batch batch;
  Output output;
  at::Tensor backward_loss;
  EpochValues epoch;

  Clock::time_point fit_start = Clock::now();
  // FLOPs (opt.flops): per training step of this rank, counted at the first step (< 0: not
  // yet; 0: nothing countable), the peak they are compared with (FLOP/s), and the window the
  // next step record's rate covers.
  double flops_per_step = -1, peak_flops = 0;
  // The first step's matrix products and convolutions' dtype (for the peak probe), and the
  // time the probe took, which no rate counts.
  std::vector<MatmulShape> step_matmuls;
  int step_conv_dtype = -1;
  double probe_seconds = 0, probe_cpu_seconds = 0;
  bool probe_due = false, probe_with_backward = false;
  Clock::time_point window_t0;
  std::int64_t window_micro0 = 0;
  double epoch_train_s = 0;
  std::int64_t epoch_micro0 = 0;
  double train_seconds = 0, train_cpu_seconds = 0;
  double first_step_s = -1;  // the process's age when its first training step began
  std::int64_t samples_this_run = 0;
  ValidResult last_valid;

  bool stop = false;
  std::string stop_reason;
  std::int64_t cancelled_steps = 0, cancelled_epochs = 0;
  Position start;                    // where fit() begins (a restored checkpoint's position)
  bool resumed = false;              // a checkpoint was restored
  bool resumed_mid_epoch = false;    // `epoch` holds the resumed epoch's earlier values
  std::int64_t rewind_records = -1;  // after before_fit: rewind the records to this count
  Position pos;                      // where the loop is between steps
  bool in_step = false;              // inside a training step (before_step .. its end)
  bool recomputing = false;          // inside Context::recompute_loss
  bool skip_batch = false;           // a non-finite loss under nan_policy "skip": no step
  bool in_fit = false;
  const CancelInfo* cancel = nullptr;  // set during after_cancel
  Collectives* collectives = nullptr;
  ShardedState* sharded_state = nullptr;         // a data-parallel plugin's sharded optimizer state
  std::unique_ptr<Collectives> own_collectives;  // for evaluate / predict (dist/ranks.hpp)
  // The training data's state after the last batch the loop consumed (has_state()): what a
  // checkpoint keeps, whatever the loader threads have loaded ahead.
  std::shared_ptr<StateDict> data_state;
  // Where this epoch's dealing of the order begins (data/sampler.hpp): saved in checkpoints,
  // moved when a run resumes on another world size or batch size.
  EpochStart epoch_start;

  torch::optim::Optimizer& optim() { return *optimizers[current_opt].optimizer; }
  // The index of an optimizer by name; throws naming the known ones.
  std::size_t optimizer_index(std::string_view name) const;
  // Runs the optimizer_step and zero_grad chains for optimizer i; true when it stepped.
  bool step_optimizer(std::size_t i);
  void zero_grad_optimizer(std::size_t i);
  void backward(const at::Tensor& loss, std::size_t i);

  bool agreed_stop(bool epoch_end) {
    return collectives ? collectives->agree_stop(stop, epoch_end) : stop;
  }
  bool distributed() const { return collectives && state.num_processes > 1; }
  // The profiler inside a training step (its phases), else null: validation steps share
  // forward_and_loss but are timed as a whole.
  Profiler* step_profiler() const { return in_step ? dispatch.profiler() : nullptr; }

  Sharding sharding() const;
  std::int64_t train_batches() const;  // batches of a training epoch on this rank
  // The same for an epoch dealt from `start` on `world` ranks at batch size bs.
  std::int64_t train_batches(EpochStart start, std::int64_t world, std::int64_t bs,
                             bool drop_last) const;
  bool streaming() const { return train_ds->size() == kUnsized; }
  LoadPlan train_plan(std::int64_t first_batch);  // the current epoch's training batches
  Batch to_device(Batch b) const;
  bool writes_outputs() const;  // this process writes the run folder (rank 0)
  void lock_outputs();
  void open_outputs();
  void train_epoch(std::int64_t first_batch);
  void cancelled(CancelScope scope);
  void train_step(BatchLoader& loader);
  void forward_and_loss();
  at::Tensor recompute_loss();
  // This rank's batches of an evaluation pass over `ds` (its shard of `order`, in order).
  LoadPlan eval_plan(Dataset& ds, const at::Tensor& order, const char* what);
  // Loss, the task's metrics and the metric plugins over `ds` (the validation data in a fit),
  // in eval mode without gradients; values PREFIX + name.
  ValidResult validation(Dataset* ds, const std::string& prefix = "valid/");
  // The metrics' values over the whole pass, their states summed over the ranks.
  void compute_metrics(ValidResult& res, const std::string& prefix);
  // The forward stage's output for every sample of `ds`, in sample order ([N, ...] float32 on
  // the CPU; every rank gets all rows).
  at::Tensor prediction(Dataset& ds, const char* what, const ProgressFn& progress);
  // Data-parallel: every rank's rows ([n_r, ...]), rank 0's first, in mine's dtype on the
  // CPU. Throws (on every rank alike) when the ranks' rows differ in shape.
  at::Tensor join_rows(const at::Tensor& mine);
  // Outside a fit with WORLD_SIZE > 1 and no hook's collectives: wick's own Gloo group.
  void join_ranks_if_needed();
  void log_step_if_due();
  // At the first training step: what the step just counted makes the FLOPs per step
  // (`with_backward`: the counted ops were the forward's, whose backward is counted as twice
  // their FLOPs); the peak is probed on the step's own matrix products if not given.
  void set_step_flops(double counted, bool with_backward);
  void probe_peak();  // after the first counted step: peak_flops
  // train/flops_per_s (all ranks) and train/flops_utilization (this rank against the peak)
  // for `steps` steps in `seconds`.
  void add_flops(Record& r, std::int64_t steps, double seconds) const;
  void write_epoch_record(Clock::time_point t_epoch, std::int64_t samples_before);
  // Means of the epoch's values from the logged marks on (or all of them), over all ranks.
  std::vector<std::pair<std::string, double>> train_means(bool whole_epoch);
  double current_lr() const;
  void add_lrs(Record& r) const;
  void write_summary_file(const FitResult* res);
  // The weights a hook keeps for evaluation, from the first hook (SDK 2.5 or newer) that
  // offers some, and its word for them; "" when none does.
  std::string eval_weights(NamedTensors& out) const;
  // When the fit has ended: rank 0 writes output_dir/model.pt (the evaluation weights a hook
  // offers, else the trained ones) if the weights are whole (not a failure inside a step) and
  // something was trained or restored; notes it in res.
  void save_final_weights(FitResult& res);
  std::string weights_loaded;  // Trainer::weights_loaded()
};

}  // namespace wick
