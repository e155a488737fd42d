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
#include "wick/run.hpp"
#include "wick/schedule.hpp"
#include "wick/state.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN, WICK_INTERNAL

WICK_PUBLIC_BEGIN

namespace wick {

class Task;
class Metric;
class StateDict;

struct TrainerOptions {
  std::int64_t epochs = 1;
  std::int64_t seed = 0;
  std::int64_t batch_size = 32;
  std::int64_t valid_batch_size = 0;  // 0: same as batch_size
  bool shuffle = true;
  bool drop_last = false;       // drop the last, short training batch of an epoch
  std::int64_t max_steps = 0;   // stop after this many optimizer steps (0: no limit)
  std::int64_t log_every = 50;  // write a step record every N training batches (0: never)
  // Intra-op threads when auto_threads is false (0: LibTorch's default, every core). With
  // auto_threads (trainer.threads = "auto", the default) the Trainer takes wick::auto_threads():
  // the cores free at its start, shared among this machine's ranks, or OMP_NUM_THREADS.
  std::int64_t threads = 0;
  bool auto_threads = true;
  std::int64_t num_workers = 0;      // threads loading batches ahead of the step (0: none)
  std::int64_t steps_per_epoch = 0;  // batches per epoch (0: from the data; needed by streams)
  Device device;                     // cpu, cuda, cuda:N
  bool auto_device = false;          // "auto": cuda when available, else cpu (overrides device)
  NanPolicy nan_policy = NanPolicy::error;
  std::string output_dir = "runs/default";
  bool write_outputs = true;  // metrics.jsonl and summary.json in output_dir
  // Count the FLOPs of the first training step (matrix products and convolutions, forward
  // x 3) and log train/flops_per_s, and train/flops_utilization against peak_gflops (0: a
  // probe measures it, as `wick doctor` does).
  bool flops = true;
  double peak_gflops = 0;
  // Write the final weights to output_dir/model.pt when the fit ends (trainer.save_model).
  bool save_model = true;
  // trainer.batch_size = "auto": make_trainer() chooses batch_size before training with
  // find_batch_size() (wick/tuning.hpp), among powers of two up to max_batch_size, and keeps
  // what it measured here as JSON for summary.json ("" when the size was given).
  bool auto_batch_size = false;
  std::int64_t max_batch_size = 1024;
  std::string batch_size_search;
  // The --set overrides the config was loaded with: summary.json keeps them beside the
  // config's path, so that `wick export RUN_DIR` rebuilds the run's task.
  std::vector<std::string> overrides;
};

// Parameters (by a glob over their names) with options of their own inside one optimizer.
struct ParamGroupOptions {
  std::string params;  // glob, e.g. "backbone.*"
  std::optional<double> lr, weight_decay;
  std::string where;  // FILE:LINE:COL of its table, for messages
};

struct OptimizerOptions {
  std::string module;  // "" : the whole model; else a top-level module of it ([optimizers.NAME])
  std::string where;   // FILE:LINE:COL of its table, for messages ("" in host programs)
  std::vector<ParamGroupOptions> groups;  // the parameters no group claims form the first group
  std::string name = "adam";              // adam, adamw, sgd
  double lr = 1e-3;
  double weight_decay = 0.0;  // 0.01 is the default for adamw when not set
  bool weight_decay_set = false;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  bool amsgrad = false;
  bool fused = false;  // adam: one pass over each float32 parameter per step
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
};

// A metric plugin instance of [[metrics]]: logged as valid/INSTANCE.
struct MetricEntry {
  std::shared_ptr<Metric> metric;
  std::string plugin;
  std::string instance;
  // The SDK minor the metric was compiled against: Metric::rows() exists from 2.2 on (an
  // older plugin's vtable ends before it). Metrics compiled with the host are current.
  int api_minor = WICK_API_MINOR;
};

struct FitResult {
  enum class Status { completed, cancelled, failed };
  Status status = Status::completed;
  std::string error;          // "plugin 'x' at after_step: message" when failed
  std::string stop_reason;    // why a graceful stop was requested, or why the fit was cancelled
  int signal = 0;             // the signal that stopped it (SIGINT, SIGTERM, SIGHUP, SIGUSR1), or 0
  bool config_error = false;  // failed on a configuration error found only at run time
  // The final weights written when the fit ended (output_dir/model.pt; "" when none was: see
  // TrainerOptions::save_model) and which they are: "trained", or the word of a hook that
  // keeps weights for evaluation ("ema").
  std::string model_file, model_weights;
  // 0, 1 (failed), 2 (configuration error) or 128 + the signal when stopped by one (130
  // SIGINT, 143 SIGTERM, 129 SIGHUP, 138 SIGUSR1)
  int exit_code() const;
};
const char* to_string(FitResult::Status s);

struct ValidResult {
  std::int64_t samples = 0;
  std::vector<std::pair<std::string, double>> values;  // "valid/loss", "valid/accuracy", ...
};

// Which of the task's data sets evaluate() and predict() run over.
enum class Split { valid, train };
const char* to_string(Split s);  // "valid", "train"

// Called after each batch of predict(): samples done (on this rank) and of how many.
using ProgressFn = std::function<void(std::int64_t done, std::int64_t total)>;

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
  // run only if connected. With WORLD_SIZE > 1 every rank takes its shard and the sums are
  // exact over all ranks (the ddp hook's collectives, or a Gloo group of wick's own).
  ValidResult evaluate(Split split = Split::valid);
  // The model's output (the task's forward) for every sample, in sample order: a float32 CPU
  // tensor [N, ...]. Data-parallel: every rank gets all N rows.
  at::Tensor predict(Split split, const ProgressFn& progress = {});
  // The same over inputs of the caller's: `input` is [N, ...] and each row one sample, as the
  // task's own data gives them (read_tensor_file in wick/tensor_files.hpp reads .npy / .csv /
  // .pt files).
  at::Tensor predict(const at::Tensor& input, const ProgressFn& progress = {});

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
  std::unique_ptr<Impl> impl_;
};

// The first SIGINT, SIGTERM, SIGHUP or SIGUSR1 asks the running fit to stop at the next step
// boundary; a second ends the process at once with status 128 + that signal. Installed by
// fit() for its duration.
// interrupt_requested() and interrupt_signal(): wick/interrupt.hpp (SDK).
void request_interrupt(int sig = SIGINT);  // what the first signal does (tests call it directly)
void clear_interrupt();

}  // namespace wick

WICK_PUBLIC_END
