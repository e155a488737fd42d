// AUROC: the probability that a positive sample scores above a negative one (ties count one
// half), the Mann-Whitney U over the product of the class counts. It ranks every score of the
// split, so no summable state gives it: the scores and targets are rows (Metric::rows, SDK
// 2.2), which wick joins over the data-parallel ranks before compute().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <wick/metric.hpp>
#include <wick/params.hpp>

#include "shapes.hpp"

namespace wick_metrics {

// The area under the ROC curve of `score` ([N] float64) for `positive` ([N] bool), with
// average ranks for tied scores; nan when one of the two classes is missing.
inline double area_under_roc(const at::Tensor& score, const at::Tensor& positive) {
  const auto n = score.size(0);
  const auto pos = positive.sum().item<std::int64_t>(), neg = n - pos;
  if (pos == 0 || neg == 0) return std::nan("");
  const auto sorted = score.sort();
  const auto& values = std::get<0>(sorted);
  const auto& order = std::get<1>(sorted);
  // Ranks 1..N in score order; a group of tied scores shares the mean of its ranks.
  const auto groups =
      at::unique_consecutive(values, /*return_inverse=*/true, /*return_counts=*/true);
  const auto counts = std::get<2>(groups).to(at::kDouble);
  const auto ends = counts.cumsum(0);
  const auto mean_rank = ends - counts + (counts + 1) / 2;
  const auto rank = mean_rank.index_select(0, std::get<1>(groups));
  const double rank_sum =
      (rank * positive.index_select(0, order).to(at::kDouble)).sum().item<double>();
  const double p = static_cast<double>(pos), q = static_cast<double>(neg);
  return (rank_sum - p * (p + 1) / 2) / (p * q);
}

class Auroc : public wick::Metric {
 public:
  explicit Auroc(const wick::Params&) {}
  void update(const at::Tensor& pred, const at::Tensor& target) override {
    const auto [s, classes] = class_scores(pred, target);
    if (!batches_.empty() && batches_.front().size(1) != s.size(1))
      throw wick::ConfigError("the prediction scores " + std::to_string(s.size(1)) +
                              " classes where earlier batches scored " +
                              std::to_string(batches_.front().size(1)));
    // A distribution's row sums to 1 within the rounding of the type it came in.
    if (s.scalar_type() == at::kBFloat16) sum_tolerance_ = std::max(sum_tolerance_, 1.6e-2);
    if (s.scalar_type() == at::kHalf) sum_tolerance_ = std::max(sum_tolerance_, 2e-3);
    batches_.push_back(s.detach().to(at::kCPU, at::kDouble));
    targets_.push_back(classes.to(at::kCPU, at::kDouble));
    const auto n = at::full({1}, static_cast<double>(s.size(0)), at::kDouble);
    if (state_.empty())
      state_.push_back(n);
    else
      state_[0] += n;
  }

  std::vector<at::Tensor>* rows() override {
    join_batches();
    return &rows_;
  }

  Values compute() const override {
    join_batches();
    const auto& s = rows_.at(0);
    const auto y = rows_.at(1).to(at::kLong);
    const auto C = s.size(1);
    if (C == 2) {
      // Class 1 against class 0: the logit difference ranks as softmax's p1 does, and p1 - p0
      // as p1 for probabilities.
      const double v = area_under_roc(s.select(1, 1) - s.select(1, 0), y.eq(1));
      if (std::isnan(v)) throw std::runtime_error(one_class_message(y));
      return {{"", v}};
    }
    // One class against the rest, each class with samples of its own and of others. Rows that
    // are each a distribution (in [0, 1], summing to 1 within 1e-3, or bf16's or fp16's
    // rounding) are probabilities; anything else is
    // logits, made probabilities by a softmax (as scikit-learn expects): logits that happen
    // to lie in [0, 1] rank otherwise than their softmax does.
    const auto d = s.to(at::kDouble);
    const bool probabilities = d.ge(0).all().item<bool>() && d.le(1).all().item<bool>() &&
                               (d.sum(1) - 1).abs().max().item<double>() < sum_tolerance_;
    const auto p = probabilities ? s : s.softmax(1);
    double sum = 0;
    int counted = 0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double v = area_under_roc(p.select(1, c).contiguous(), y.eq(c));
      if (std::isnan(v)) continue;
      sum += v;
      ++counted;
    }
    if (counted == 0) throw std::runtime_error(one_class_message(y));
    return {{"", sum / counted}};
  }

  std::vector<at::Tensor>& state() override { return state_; }

  void reset() override {
    state_.clear();
    rows_.clear();
    batches_.clear();
    targets_.clear();
    sum_tolerance_ = 1e-3;
  }

 private:
  // The batches so far as the two row tensors (scores [N, C], targets [N]): one cat, when
  // the rows are asked for rather than at every batch.
  void join_batches() const {
    if (batches_.empty()) return;
    if (!rows_.empty()) {
      batches_.insert(batches_.begin(), rows_[0]);
      targets_.insert(targets_.begin(), rows_[1]);
    }
    rows_ = {at::cat(batches_), at::cat(targets_)};
    batches_.clear();
    targets_.clear();
  }

  static std::string one_class_message(const at::Tensor& y) {
    return "AUROC needs samples of two classes, and the split's targets are all " +
           std::to_string(y.numel() ? y[0].item<std::int64_t>() : -1) +
           "; validate on data with both positive and negative samples";
  }

  std::vector<at::Tensor> state_;  // the sample count: summed, so ranks are checked alike
  mutable std::vector<at::Tensor> rows_, batches_, targets_;
  double sum_tolerance_ = 1e-3;
};

}  // namespace wick_metrics
