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

// Class scores [N, C] (logits or probabilities) against integer classes [N]; a single score
// per sample ([N] or [N, 1], a binary logit) becomes the two columns [0, x], whose argmax and
// softmax are those of the logit. Throws wick::ConfigError naming the shapes and the fix.
inline at::Tensor class_scores(const at::Tensor& pred, const at::Tensor& target) {
  auto found = [&] {
    return "; got prediction " + shape_of(pred) + " and target " + shape_of(target);
  };
  if (target.dim() != 1 || at::isFloatingType(target.scalar_type()) ||
      target.scalar_type() == at::kBool)
    throw wick::ConfigError("needs integer class targets [N]" + found() +
                            " (a regression target: use mae, mse, rmse or r2)");
  at::Tensor s = pred;
  if (s.dim() == 2 && s.size(1) == 1) s = s.squeeze(1);
  if (s.dim() == 1) s = at::stack({at::zeros_like(s), s}, 1);
  if (s.dim() != 2 || s.size(0) != target.size(0) || s.size(1) < 2)
    throw wick::ConfigError("needs class scores [N, C] (C >= 2) for targets [N]" + found());
  const auto C = s.size(1);
  if (target.numel() > 0) {
    // One host sync per batch for both bounds.
    const auto bounds = at::stack({target.min(), target.max()}).to(at::kCPU, at::kLong);
    const auto lo = bounds[0].item<std::int64_t>(), hi = bounds[1].item<std::int64_t>();
    if (lo < 0 || hi >= C)
      throw wick::ConfigError("target class " + std::to_string(lo < 0 ? lo : hi) +
                              " is outside the " + std::to_string(C) +
                              " classes the prediction scores" + found());
  }
  return s;
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
