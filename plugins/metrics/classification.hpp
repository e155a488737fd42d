// Classification metrics over a whole split. The state of each is counts that add up over
// batches and ranks: correct and total, or the confusion matrix (rows: true class, columns:
// predicted), from which precision, recall and F1 follow exactly.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <wick/files.hpp>
#include <wick/metric.hpp>
#include <wick/params.hpp>

#include "shapes.hpp"

namespace wick_metrics {

// accuracy, and top_k_accuracy: the target among the k highest scores.
class TopK : public wick::Metric {
 public:
  explicit TopK(const wick::Params& p) : k_(p.has("k") ? p.get_int("k") : 1) {
    if (k_ < 1) throw p.error("k", "must be >= 1");
  }
  void update(const at::Tensor& pred, const at::Tensor& target) override {
    const auto [s, classes] = class_scores(pred, target);
    if (k_ > s.size(1))
      throw wick::ConfigError(
          "k = " + std::to_string(k_) + " is above the " + std::to_string(s.size(1)) +
          " classes the prediction scores; set k to at most " + std::to_string(s.size(1)));
    const auto t = classes.to(s.device()).to(at::kLong).unsqueeze(1);
    // Ranked as argmax ranks (k = 1), on every device (topk's order of ties is unspecified):
    // NaN above every number, ties the lower class first. A hit when fewer than k classes
    // rank above the target.
    at::Tensor hit;
    if (k_ == 1) {
      hit = s.argmax(1, true).eq(t);
    } else {
      const auto st = s.gather(1, t);
      const auto nan = s.isnan(), target_nan = st.isnan();
      const auto above = s.gt(st).logical_or(nan.logical_and(target_nan.logical_not()));
      const auto tied = s.eq(st).logical_or(nan.logical_and(target_nan));
      const auto index = at::arange(s.size(1), t.options()).unsqueeze(0);
      hit = (above.sum(1) + tied.logical_and(index.lt(t)).sum(1)).lt(k_).unsqueeze(1);
    }
    const auto counts =
        at::stack({hit.any(1).sum().to(at::kDouble),
                   at::full({}, static_cast<double>(s.size(0)), s.options().dtype(at::kDouble))});
    if (state_.empty())
      state_.push_back(counts);
    else
      state_[0] += counts;
  }
  Values compute() const override {
    const auto c = state_[0].cpu();
    const double total = c[1].item<double>();
    return {{"", total > 0 ? c[0].item<double>() / total : 0.0}};
  }
  std::vector<at::Tensor>& state() override { return state_; }

 private:
  std::int64_t k_;
  std::vector<at::Tensor> state_;
};

// The confusion matrix [C, C], counted with one bincount per batch.
class Confusion : public wick::Metric {
 public:
  void update(const at::Tensor& pred, const at::Tensor& target) override {
    const auto [s, classes] = class_scores(pred, target);
    const auto C = s.size(1);
    const auto idx = classes.to(s.device()).to(at::kLong) * C + s.argmax(1);
    const auto counts = at::bincount(idx, {}, C * C).to(at::kDouble).reshape({C, C});
    if (state_.empty()) {
      state_.push_back(counts);
    } else {
      if (state_[0].size(0) != C)
        throw wick::ConfigError("the prediction scores " + std::to_string(C) +
                                " classes, an earlier batch's " +
                                std::to_string(state_[0].size(0)));
      state_[0] += counts;
    }
  }
  std::vector<at::Tensor>& state() override { return state_; }

 protected:
  std::vector<at::Tensor> state_;
};

// precision, recall and f1 with average micro, macro or weighted, as scikit-learn computes
// them: a class with no true and no predicted sample is left out of the macro mean; a ratio
// with a zero denominator counts 0 (zero_division = 0).
class PrecisionRecallF1 : public Confusion {
 public:
  enum class Kind { precision, recall, f1 };
  PrecisionRecallF1(const wick::Params& p, Kind kind)
      : kind_(kind), average_(p.get_string("average")) {}

  Values compute() const override {
    const auto m = state_[0].cpu();
    const auto tp = m.diagonal();
    const auto predicted = m.sum(0), actual = m.sum(1);
    const auto fp = predicted - tp, fn = actual - tp;
    if (average_ == "micro") return {{"", score(tp.sum(), fp.sum(), fn.sum()).item<double>()}};
    const auto per_class = score(tp, fp, fn);
    if (average_ == "weighted") {
      const double total = actual.sum().item<double>();
      return {{"", total > 0 ? (per_class * actual).sum().item<double>() / total : 0.0}};
    }
    const auto present = (actual + predicted) > 0;
    const auto n = present.sum().item<std::int64_t>();
    return {{"", n > 0 ? per_class.masked_select(present).sum().item<double>() / n : 0.0}};
  }

 private:
  static at::Tensor ratio(const at::Tensor& a, const at::Tensor& b) {
    return at::where(b > 0, a / b.clamp_min(1e-300), at::zeros_like(a));
  }
  at::Tensor score(const at::Tensor& tp, const at::Tensor& fp, const at::Tensor& fn) const {
    switch (kind_) {
      case Kind::precision:
        return ratio(tp, tp + fp);
      case Kind::recall:
        return ratio(tp, tp + fn);
      case Kind::f1:
        return ratio(2 * tp, 2 * tp + fp + fn);
    }
    return tp;
  }
  Kind kind_;
  std::string average_;
};

struct Precision : PrecisionRecallF1 {
  explicit Precision(const wick::Params& p) : PrecisionRecallF1(p, Kind::precision) {}
};
struct Recall : PrecisionRecallF1 {
  explicit Recall(const wick::Params& p) : PrecisionRecallF1(p, Kind::recall) {}
};
struct F1 : PrecisionRecallF1 {
  explicit F1(const wick::Params& p) : PrecisionRecallF1(p, Kind::f1) {}
};

// The confusion matrix as NAME.csv in the run folder (rows: true class, columns: predicted),
// rewritten at each validation; no logged value.
class ConfusionMatrix : public Confusion {
 public:
  explicit ConfusionMatrix(const wick::Params&) {}
  Values compute() const override { return {}; }
  void write_files(const std::string& run_dir, const std::string& name) const override {
    const auto m = state_[0].cpu().to(at::kLong);
    const auto C = m.size(0);
    std::ostringstream out;
    out << "true/predicted";
    for (std::int64_t j = 0; j < C; ++j) out << ',' << j;
    out << '\n';
    auto a = m.accessor<std::int64_t, 2>();
    for (std::int64_t i = 0; i < C; ++i) {
      out << i;
      for (std::int64_t j = 0; j < C; ++j) out << ',' << a[i][j];
      out << '\n';
    }
    wick::write_file_atomic(run_dir + "/" + name + ".csv", out.str());
  }
};

}  // namespace wick_metrics
