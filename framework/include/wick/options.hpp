// What a Trainer is given: its options (the [trainer] table), its optimizers' ([optimizer],
// [optimizers.NAME]) and its metric plugins ([[metrics]]). Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wick/run.hpp"      // Device, NanPolicy
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN, WICK_API_MINOR

WICK_PUBLIC_BEGIN

namespace wick {

class Metric;

// The optimizers a config names ([optimizer] name).
enum class OptimizerKind : std::uint8_t { adam, adamw, sgd };
const char* to_string(OptimizerKind k);  // "adam", "adamw", "sgd"
std::optional<OptimizerKind> optimizer_kind(std::string_view name);

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
  std::int64_t num_workers = 0;  // threads loading batches ahead of the step (0: none)
  // A training set held in tensors (wick::TensorDataset) is copied to the CUDA device once and
  // each batch gathered there on the main thread (num_workers does not apply to it).
  bool data_on_device = false;
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
  OptimizerKind kind = OptimizerKind::adam;
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

}  // namespace wick

WICK_PUBLIC_END
