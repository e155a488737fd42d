// The current training epoch's per-batch values, and their part of a checkpoint.
#include "loop/epoch_values.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "wick/state_dict.hpp"

namespace wick {

void EpochValues::clear() {
  losses.clear();
  names.clear();
  metrics.clear();
  logged_loss = 0;
  logged_metric.clear();
}

void EpochValues::add_metric(const std::string& name, const at::Tensor& v) {
  std::size_t k = 0;
  while (k < names.size() && names[k] != name) ++k;
  if (k == names.size()) {
    names.push_back(name);
    metrics.emplace_back();
    logged_metric.push_back(0);
  }
  metrics[k].push_back(v.detach());
}

void EpochValues::mark_logged() {
  logged_loss = losses.size();
  for (std::size_t k = 0; k < names.size(); ++k) logged_metric[k] = metrics[k].size();
}

void EpochValues::save(StateDict& out) const {
  if (!losses.empty()) out.set_tensor("epoch_losses", at::stack(losses));
  out.set_int("logged_upto", static_cast<std::int64_t>(logged_loss));
  out.set_int("metrics", static_cast<std::int64_t>(names.size()));
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto i = std::to_string(k);
    out.set_string("metric_name." + i, names[k]);
    if (!metrics[k].empty()) out.set_tensor("metric_values." + i, at::stack(metrics[k]));
    out.set_int("metric_logged." + i, static_cast<std::int64_t>(logged_metric[k]));
  }
}

void EpochValues::load(const StateDict& in) {
  clear();
  auto unstack = [](const at::Tensor& t) {
    std::vector<at::Tensor> v;
    for (std::int64_t i = 0; i < t.size(0); ++i) v.push_back(t[i]);
    return v;
  };
  if (in.has("epoch_losses")) losses = unstack(in.get_tensor("epoch_losses"));
  logged_loss =
      std::min(static_cast<std::size_t>(std::max<std::int64_t>(0, in.get_int("logged_upto"))),
               losses.size());
  const std::int64_t n = in.has("metrics") ? in.get_int("metrics") : 0;
  if (n < 0 || n > 10000) throw std::runtime_error("loop state: bad metric count");
  for (std::int64_t k = 0; k < n; ++k) {
    const auto i = std::to_string(k);
    names.push_back(in.get_string("metric_name." + i));
    metrics.push_back(in.has("metric_values." + i) ? unstack(in.get_tensor("metric_values." + i))
                                                   : std::vector<at::Tensor>{});
    logged_metric.push_back(std::min(
        static_cast<std::size_t>(std::max<std::int64_t>(0, in.get_int("metric_logged." + i))),
        metrics.back().size()));
  }
}

}  // namespace wick
