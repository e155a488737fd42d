// minimal_metric: balanced accuracy, the mean over classes of the share of each class's
// samples predicted right, over a whole split (not a mean over batches). Build:
// find_package(wick) and wick_add_plugin(minimal_metric SOURCES minimal_metric.cpp). Run:
// [[metrics]] plugin = "minimal_metric" in the run's TOML file; logged as
// valid/minimal_metric.
#include <cstdint>

#include <torch/torch.h>
#include <wick/metric.hpp>
#include <wick/wick.hpp>

namespace {

class MinimalMetric : public wick::Metric {
 public:
  // p holds the validated table; this metric has one parameter.
  explicit MinimalMetric(const wick::Params& p) : min_samples_(p.get_int("min_samples")) {
    if (min_samples_ < 1) throw p.error("min_samples", "must be >= 1");
  }

  // Per batch: counts per class that add up over batches and data-parallel ranks. The first
  // batch sizes them from the number of class scores.
  void update(const at::Tensor& pred, const at::Tensor& target) override {
    if (pred.dim() != 2 || target.dim() != 1 || pred.size(0) != target.size(0))
      throw wick::ConfigError("needs class scores [N, C] and class targets [N]");
    const auto classes = pred.size(1);
    const auto t = target.to(torch::kLong);
    const auto right = pred.argmax(1).eq(t).to(torch::kDouble);
    auto per_class = torch::zeros({2, classes}, right.options());
    per_class[0].index_add_(0, t, right);                    // correct per class
    per_class[1].index_add_(0, t, torch::ones_like(right));  // samples per class
    if (state_.empty())
      state_.push_back(per_class);
    else
      state_[0] += per_class;
  }

  // From the whole split's counts (wick has summed them over the ranks).
  std::vector<std::pair<std::string, double>> compute() const override {
    const auto c = state_[0].cpu();
    const auto seen = c[1] >= static_cast<double>(min_samples_);
    const auto n = seen.sum().item<double>();
    const auto recall = c[0].masked_select(seen) / c[1].masked_select(seen);
    return {{"", n > 0 ? recall.sum().item<double>() / n : 0.0}};
  }

  std::vector<at::Tensor>& state() override { return state_; }

 private:
  std::int64_t min_samples_;
  std::vector<at::Tensor> state_;
};

}  // namespace

WICK_PLUGIN(MinimalMetric,
            wick::PluginDef("minimal_metric", "1.0.0",
                            "balanced accuracy: the mean over classes of each class's recall")
                .param_int("min_samples", 1, "classes with fewer samples are left out"))
