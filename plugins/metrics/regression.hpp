// Regression metrics over a whole split, from sums that add up over batches and ranks. With
// several outputs per sample, each output's value is computed and the outputs averaged
// uniformly, as scikit-learn's default (multioutput = "uniform_average") does.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <wick/metric.hpp>
#include <wick/params.hpp>

#include "shapes.hpp"

namespace wick_metrics {

// Adds one batch's sums (last dimension: the outputs) and its sample count to the state
// {sums, count}; the number of outputs must stay the first batch's.
inline void accumulate(std::vector<at::Tensor>& state, const at::Tensor& sums, std::int64_t n) {
  const auto count = at::full({1}, static_cast<double>(n), sums.options());
  if (state.empty()) {
    state = {sums, count};
    return;
  }
  if (state[0].size(-1) != sums.size(-1))
    throw wick::ConfigError("the prediction has " + std::to_string(sums.size(-1)) +
                            " outputs per sample, an earlier batch's " +
                            std::to_string(state[0].size(-1)));
  state[0] += sums;
  state[1] += count;
}

// mae, mse, rmse: sums of |error| or error² per output, and the sample count.
class ErrorMean : public wick::Metric {
 public:
  enum class Kind { mae, mse, rmse };
  explicit ErrorMean(Kind kind) : kind_(kind) {}
  void update(const at::Tensor& pred, const at::Tensor& target) override {
    const auto [p, t] = paired(pred, target.to(pred.device()));
    const auto e = p - t;
    const auto sums = (kind_ == Kind::mae ? e.abs() : e * e).sum(0);
    accumulate(state_, sums, p.size(0));
  }
  std::vector<std::pair<std::string, double>> compute() const override {
    const auto per_output = state_[0].cpu() / state_[1].cpu();
    const auto v = kind_ == Kind::rmse ? per_output.sqrt() : per_output;
    return {{"", v.mean().item<double>()}};
  }
  std::vector<at::Tensor>& state() override { return state_; }

 private:
  Kind kind_;
  std::vector<at::Tensor> state_;
};

struct Mae : ErrorMean {
  explicit Mae(const wick::Params&) : ErrorMean(Kind::mae) {}
};
struct Mse : ErrorMean {
  explicit Mse(const wick::Params&) : ErrorMean(Kind::mse) {}
};
struct Rmse : ErrorMean {
  explicit Rmse(const wick::Params&) : ErrorMean(Kind::rmse) {}
};

// r2, the coefficient of determination: 1 - SS_res / SS_tot per output, SS_tot from the sums
// of y and y² (float64). As scikit-learn: an output with SS_tot = 0 scores 1 when predicted
// exactly, else 0.
class R2 : public wick::Metric {
 public:
  explicit R2(const wick::Params&) {}
  void update(const at::Tensor& pred, const at::Tensor& target) override {
    const auto [p, t] = paired(pred, target.to(pred.device()));
    const auto e = p - t;
    accumulate(state_, at::stack({(e * e).sum(0), t.sum(0), (t * t).sum(0)}), p.size(0));
  }
  std::vector<std::pair<std::string, double>> compute() const override {
    const auto s = state_[0].cpu();
    const double n = state_[1].cpu().item<double>();
    const auto ss_res = s[0], ss_tot = s[2] - s[1] * s[1] / n;
    double total = 0;
    const auto D = s.size(1);
    for (std::int64_t d = 0; d < D; ++d) {
      const double res = ss_res[d].item<double>(), tot = ss_tot[d].item<double>();
      total += tot > 0 ? 1.0 - res / tot : (res == 0 ? 1.0 : 0.0);
    }
    return {{"", total / static_cast<double>(D)}};
  }
  std::vector<at::Tensor>& state() override { return state_; }

 private:
  std::vector<at::Tensor> state_;
};

}  // namespace wick_metrics
