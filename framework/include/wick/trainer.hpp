// The Trainer: runs fit / validate and fires the lifecycle points; backward, optimizer step
// and zero_grad are stage chains that hooks take over. Usable from a host program: build a
// Task, make a Trainer, add hooks (or load them from TOML with wick/config.hpp), call fit().
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wick/checkpoint.hpp"
#include "wick/context.hpp"
#include "wick/hook.hpp"
#include "wick/interrupt.hpp"
#include "wick/options.hpp"
#include "wick/results.hpp"
#include "wick/run.hpp"
#include "wick/schedule.hpp"
#include "wick/state.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN, WICK_INTERNAL

WICK_PUBLIC_BEGIN

namespace wick {

class Task;
class Metric;
class StateDict;

class Trainer {
 public:
  Trainer(TrainerOptions options, std::shared_ptr<Task> task, OptimizerOptions optimizer = {},
          RunInfo run = {});
  // Several optimizers, each over one top-level module of the task's model (module names),
  // or one optimizer (module "") over the whole model.
  Trainer(TrainerOptions options, std::shared_ptr<Task> task,
          std::vector<OptimizerOptions> optimizers, RunInfo run = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Hooks in config order; ties in order keep this order. Must come before fit()/describe().
  void add_hook(HookEntry entry);
  const std::vector<HookEntry>& hooks() const;
  // Metrics computed over each whole validation (valid/INSTANCE), in the order added.
  void add_metric(MetricEntry entry);
  const std::vector<MetricEntry>& metrics() const;

  // Sorts hooks once, connects their points and stage handlers, checks stage requirements.
  // Called by fit() when not done yet. Throws ConfigError on an impossible order.
  void connect();
  // For a trainer that evaluates or predicts and will not fit (what `wick evaluate` and `wick
  // predict` do): connects only the forward stage handlers of the hooks and the task, which a
  // fit's validation runs too (mixed_precision's autocast, channels_last's input layout), so
  // that evaluate() gives the validation's numbers. No point fires. fit(), validate() and
  // describe() after it throw std::logic_error.
  void connect_for_evaluation();

  // Trains the run, once: a second call throws std::logic_error (a Trainer's counters, records
  // and run folder are one fit's; make another Trainer to train again). One thread of a
  // process fits at a time: a fit() while another thread's runs throws std::logic_error (the
  // signal handlers, the crash report and LibTorch's thread count are the process's).
  FitResult fit();
  ValidResult validate();

  // Using a trained model. load_weights() reads a checkpoint folder as untrusted input
  // (manifest, sizes, sha256) and copies its model.pt into the model; nothing else of the run
  // (optimizer, counters) changes. Throws CheckpointError for an unusable folder and
  // ConfigError for a model that does not match it. `evaluation`: then the weights a hook
  // keeps for evaluation (Hook::eval_weights: the ema hook's average), as the checkpoint's
  // hook states hold them, replace the trained ones where a hook offers some;
  // weights_loaded() tells whose.
  CheckpointInfo load_weights(const std::string& folder, bool evaluation = false);
  // The final weights a fit wrote (output_dir/model.pt: parameters and buffers by name, what
  // it kept: see summary.json's model_weights). ConfigError for a file that does not match.
  void load_model_file(const std::string& file);
  // After load_weights(..., true): the word of the weights that replaced the trained ones
  // ("ema"), or "" when no hook offered any.
  const std::string& weights_loaded() const;
  // The split's loss, the task's validation metrics and the metric plugins over the whole
  // split, in eval mode without gradients: values "SPLIT/NAME". The same computation as a
  // fit's validation (evaluate(Split::valid) equals validate() for the same weights); hooks
  // run only if connected (connect, or connect_for_evaluation: their forward handlers). With
  // WORLD_SIZE > 1 every rank takes its shard and the sums are exact over all ranks (the ddp
  // hook's collectives, or a Gloo group of wick's own).
  ValidResult evaluate(Split split = Split::valid);
  // The model's output (the task's forward) for every sample, in sample order: a float32 CPU
  // tensor [N, ...]. Data-parallel: every rank gets all N rows.
  at::Tensor predict(Split split, const ProgressFn& progress = {});
  // The same over inputs of the caller's: `input` is [N, ...] and each row one sample, as the
  // task's own data gives them (read_tensor_file in wick/tensor_files.hpp reads .npy / .csv /
  // .pt files).
  at::Tensor predict(const at::Tensor& input, const ProgressFn& progress = {});

  // `wick check`'s probe of the [[metrics]]: the first two validation samples through the
  // task's forward, without hooks, and into each metric's update, then reset. Throws
  // ConfigError, naming the metric, for one that cannot read the predictions (a regression
  // metric on class scores, top_k above the classes). Before connect().
  void probe_metrics();

  // The Markdown schedule: every point with its hooks, then the three stage chains.
  std::string describe();

  // For host programs and tests: the loop's state and what it trains.
  StepState& state();
  const TrainerOptions& options() const;
  const RunInfo& run() const;
  Task& task();
  torch::nn::Module& model();
  torch::optim::Optimizer& optimizer();
  Context& context();

  // The seed of the sample order of an epoch; the order is a function of (seed, epoch) alone
  // so that a resumed run sees the same batches.
  std::uint64_t epoch_seed(std::int64_t epoch) const;

  // sha256 over the bytes of all parameters and buffers, in order (hex).
  std::string model_fingerprint();

  // Who runs at each point and in each stage chain, after connect().
  const ScheduleTable& schedule() const;

  // Benchmark seam (bench/wick_bench): fires `points` in turn, `repeats` times, through the
  // loop's own dispatch path, so its cost can be measured without the model's. Not for hooks.
  void emit_for_benchmark(const std::vector<Point>& points, std::int64_t repeats);

  // Not exported with its class (wick/version.hpp).
  struct WICK_INTERNAL Impl;

 private:
  void add_task_hook();  // the task's own subscriptions, as a hook run first
  std::unique_ptr<Impl> impl_;
};

// The first SIGINT, SIGTERM, SIGHUP or SIGUSR1 asks the running fit to stop at the next step
// boundary; a second from the same sender (or a third from any) ends the process at once with
// status 128 + that signal. Installed by fit() for its duration.
// fit() also handles the fatal signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) for its
// duration: it reports them (stderr, summary.json) and hands them to the handler the program
// had before, or the system's.
// interrupt_requested() and interrupt_signal(): wick/interrupt.hpp (SDK).
void request_interrupt(int sig = SIGINT);  // what the first signal does (tests call it directly)
void clear_interrupt();

}  // namespace wick

WICK_PUBLIC_END
