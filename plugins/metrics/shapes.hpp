// What the built-in metrics accept, checked on every batch with messages that say what was
// found and what fits: class scores for the classification metrics, a prediction shaped like
// the target for the regression metrics.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <wick/params.hpp>

namespace wick_metrics {

using Values = std::vector<std::pair<std::string, double>>;

inline std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "] " + std::string(c10::toString(t.scalar_type()));
}

// Class scores and the classes they score.
struct Scored {
  at::Tensor scores;   // [N, C], C >= 2
  at::Tensor classes;  // [N], integer
};

// Class scores [N, C] (logits or probabilities) against integer classes [N]; a single score
// per sample ([N] or [N, 1], a binary logit) becomes the two columns [0, x], whose argmax and
// softmax are those of the logit, and may take the 0/1 floating targets bce_with_logits trains
// on ([N] or [N, 1]). Throws wick::ConfigError naming the shapes and the fix.
inline Scored class_scores(const at::Tensor& pred, const at::Tensor& target) {
  auto found = [&] {
    return "; got prediction " + shape_of(pred) + " and target " + shape_of(target);
  };
  at::Tensor s = pred;
  if (s.dim() == 2 && s.size(1) == 1) s = s.squeeze(1);
  at::Tensor t = target;
  const bool binary_floats =
      s.dim() == 1 && (at::isFloatingType(t.scalar_type()) || t.scalar_type() == at::kBool);
  // Checked 0/1 (the batch's one host sync): within the two columns, no bounds to read.
  bool within_classes = false;
  if (binary_floats) {
    if (t.dim() == 2 && t.size(1) == 1) t = t.squeeze(1);
    if (t.dim() == 1 && t.numel() > 0 && at::logical_and(t.ne(0), t.ne(1)).any().item<bool>())
      throw wick::ConfigError(
          "needs 0/1 targets for a single score per sample (a binary "
          "logit)" +
          found() + " (a regression target: use mae, mse, rmse or r2)");
    if (t.dim() == 1) {
      t = t.to(at::kLong);
      within_classes = true;
    }
  }
  if (t.dim() != 1 || at::isFloatingType(t.scalar_type()) || t.scalar_type() == at::kBool)
    throw wick::ConfigError(
        "needs integer class targets [N] (or 0/1 ones for a single score "
        "per sample)" +
        found() +
        (at::isFloatingType(target.scalar_type())
             ? " (a regression target: use mae, mse, rmse or r2)"
             : ""));
  if (s.dim() == 1) s = at::stack({at::zeros_like(s), s}, 1);
  if (s.dim() != 2 || s.size(0) != t.size(0) || s.size(1) < 2)
    throw wick::ConfigError("needs class scores [N, C] (C >= 2) for targets [N]" + found());
  const auto C = s.size(1);
  if (t.numel() > 0 && !within_classes) {
    // One host sync per batch for both bounds.
    const auto bounds = at::stack({t.min(), t.max()}).to(at::kCPU, at::kLong);
    const auto lo = bounds[0].item<std::int64_t>(), hi = bounds[1].item<std::int64_t>();
    if (lo < 0 || hi >= C)
      throw wick::ConfigError("target class " + std::to_string(lo < 0 ? lo : hi) +
                              " is outside the " + std::to_string(C) +
                              " classes the prediction scores" + found());
  }
  return {s, t};
}

// The prediction reshaped to the target's shape, both float64 [N, D] (D outputs per sample).
inline std::pair<at::Tensor, at::Tensor> paired(const at::Tensor& pred, const at::Tensor& target) {
  if (target.dim() < 1 || pred.dim() < 1 || pred.size(0) != target.size(0) ||
      pred.numel() != target.numel())
    throw wick::ConfigError("needs a prediction shaped like the target; got prediction " +
                            shape_of(pred) + " and target " + shape_of(target) +
                            (pred.dim() == 2 && target.dim() == 1 && pred.size(1) > 1
                                 ? " (class scores: use accuracy, f1, precision or recall)"
                                 : ""));
  const auto n = target.size(0);
  return {pred.reshape({n, -1}).to(at::kDouble), target.reshape({n, -1}).to(at::kDouble)};
}

}  // namespace wick_metrics
