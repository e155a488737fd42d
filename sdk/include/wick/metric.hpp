// Metric plugins (SDK 2.1): values computed over a whole split, not averaged over batches.
// F1, precision, recall, R² and AUROC are not means of per-batch values; a metric keeps a
// state that adds up over batches and over data-parallel ranks (counts, sums, a confusion
// matrix), and computes its values from the whole set's state at the end. A metric that
// needs every sample (AUROC ranks all scores) keeps rows instead (SDK 2.2), which wick joins
// over the ranks.
//
//   class MyMetric : public wick::Metric {
//    public:
//     explicit MyMetric(const wick::Params& p) {}
//     void update(const at::Tensor& pred, const at::Tensor& target) override { ... }
//     std::vector<std::pair<std::string, double>> compute() const override { ... }
//     std::vector<at::Tensor>& state() override { return state_; }
//   };
//   WICK_PLUGIN(MyMetric, wick::PluginDef("my_metric", "1.0.0", "What it measures"))
//
// Enabled per instance under [[metrics]] (plugin, name, the plugin's parameters) and logged
// as valid/NAME, or valid/NAME/KEY for a metric with several values.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

class Metric {
 public:
  virtual ~Metric() = default;

  // One batch: the task's prediction (its forward's output) and the batch's target, as the
  // task's loss sees them, without gradients. The first call after a reset may size the
  // state (the number of classes from pred's shape). A prediction the metric cannot use
  // throws wick::ConfigError saying what was found and the fix (r2 on class scores, k above
  // the number of classes): the framework adds the metric's name.
  virtual void update(const at::Tensor& pred, const at::Tensor& target) = 0;

  // The values from the state, which the framework has summed over the data-parallel ranks.
  // Key "" for a metric's one value (valid/NAME), else valid/NAME/KEY: at most 64 letters,
  // digits, '_', '-' and '.', each key once (else the validation fails, naming it). Called
  // only after at least one update.
  virtual std::vector<std::pair<std::string, double>> compute() const = 0;

  // The state: tensors that add up over batches and ranks, any dtype and device (float64
  // keeps sums exact). The framework sums each over the ranks before compute() and saves them
  // in checkpoints. Empty until the first update.
  virtual std::vector<at::Tensor>& state() = 0;

  // Starts over before each pass over a split; by default empties the state.
  virtual void reset() { state().clear(); }

  // After compute() on the main process: files of its own in the run folder, named after
  // the instance (confusion_matrix writes NAME.csv). Optional.
  virtual void write_files(const std::string& /*run_dir*/, const std::string& /*name*/) const {}

  // SDK 2.2. Tensors of per-sample rows ([n, ...], a row per sample seen) that are joined,
  // not summed: before compute(), wick replaces each by the rows of all ranks, rank 0's
  // first, in the order of the data. nullptr (the default): none. A metric with rows still
  // keeps a state (a count will do) and clears its rows in reset(). Rows cost memory in
  // proportion to the split; use them only where no summable state gives the value.
  virtual std::vector<at::Tensor>* rows() { return nullptr; }
};

}  // namespace wick

WICK_PUBLIC_END
