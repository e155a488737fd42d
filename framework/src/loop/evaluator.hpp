// Private: the evaluator. The fit's validation (loss, the task's metrics and the metric
// plugins, their states reduced over the ranks), and the passes over a trained model that
// evaluate and predict make. They share one evaluation pass: eval mode, no gradient, this
// rank's shard in sample order, batches through the step engine's forward (and loss). It owns
// the [[metrics]] and what the last validation gave; the rest is the trainer's, bound once.
#pragma once

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/batch_loader.hpp"
#include "data/sampler.hpp"
#include "dist/data_parallel.hpp"
#include "loop/forward_pass.hpp"
#include "loop/loop_events.hpp"
#include "loop/loop_state.hpp"
#include "wick/options.hpp"
#include "wick/results.hpp"

// Evaluator is exported for the white-box tests (tests/test_evaluator.cpp); its Ranks adapter
// below is not.
WICK_PUBLIC_BEGIN

namespace wick {

class StateDict;

class Evaluator {
 public:
  // The points a validation emits and the place an error is blamed on (the dispatcher's).
  using Events = LoopEvents;
  // Sums across the job's ranks (the data-parallel strategy's collectives).
  class Ranks {
   public:
    virtual bool distributed() const = 0;
    virtual void all_reduce_sum(at::Tensor& t) const = 0;

   protected:
    ~Ranks() = default;
  };

  // What a pass works with, owned by the trainer.
  struct Parts {
    const TrainerOptions& opt;  // seed, num_workers
    const RunInfo& run;         // valid_batch_size, output_dir
    const torch::Device& device;
    const std::shared_ptr<torch::nn::Module>& model;
    const std::shared_ptr<Dataset>& valid_ds;
    StepState& state;
    Events& events;
    ForwardPass& pass;  // the step engine's forward and loss
    const Ranks& ranks;
    std::function<void(CancelScope)> cancelled;  // a CancelStep or CancelEpoch was caught
    std::function<bool()> writes_metric_files;   // in a fit that holds the run folder
  };
  explicit Evaluator(Parts parts) : p_(std::move(parts)) {}
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Adds a [[metrics]] entry; throws ConfigError for a second one of the same name.
  void add_metric(MetricEntry entry);
  const std::vector<MetricEntry>& metrics() const { return metrics_; }
  // What the fit's last validation gave (epoch records, summary.json). A checkpoint keeps it,
  // for a resumed run that validates no more (one resumed at its end).
  ValidResult last_valid;
  void save_last_valid(StateDict& out) const;
  void load_last_valid(const StateDict& in);

  // This rank's batches of an evaluation pass over `ds` (its shard of `order`, in order).
  LoadPlan eval_plan(Dataset& ds, const at::Tensor& order, const char* what) const;
  // Loss, the task's metrics and the metric plugins over `ds` (the validation data in a fit),
  // in eval mode without gradients; values PREFIX + name.
  ValidResult validation(Dataset* ds, const std::string& prefix = "valid/");
  // The first samples of `ds` through the forward and every metric's update, then the metrics
  // reset: a metric that cannot read the task's predictions throws here (`wick check`), not
  // after a fit's first epoch. Nothing for a stream, or a set whose reads move its state.
  void probe_metrics(Dataset* ds);
  // The forward stage's output for every sample of `ds`, in sample order ([N, ...] float32 on
  // the CPU; every rank gets all rows).
  at::Tensor prediction(Dataset& ds, const char* what, const ProgressFn& progress);

 private:
  Sharding sharding() const { return {p_.state.num_processes, p_.state.rank}; }
  // The metrics' values over the whole pass, their states summed over the ranks.
  void compute_metrics(ValidResult& res, const std::string& prefix);
  // Data-parallel: every rank's rows ([n_r, ...]), rank 0's first, in mine's dtype on the
  // CPU. Throws (on every rank alike) when the ranks' rows differ in shape.
  at::Tensor join_rows(const at::Tensor& mine);

  Parts p_;
  std::vector<MetricEntry> metrics_;
  // Per metric, where an error is blamed ("metric 'f1_macro' (plugin 'f1') update"; the
  // dispatcher keeps a view, so these strings stay put once the fit starts).
  std::vector<std::pair<std::string, std::string>> places_;
  std::set<std::string> nonfinite_said_;  // values warned of as NaN or infinite
};

}  // namespace wick

WICK_PUBLIC_END

namespace wick {

// The trainer's side of an Evaluator's Ranks (its Events: DispatcherPort, dispatch.hpp).
class DataParallelRanks final : public Evaluator::Ranks {
 public:
  explicit DataParallelRanks(const DataParallel& dp) : dp_(dp) {}
  bool distributed() const override { return dp_.distributed(); }
  void all_reduce_sum(at::Tensor& t) const override { dp_.all_reduce_sum(t); }

 private:
  const DataParallel& dp_;
};

}  // namespace wick
