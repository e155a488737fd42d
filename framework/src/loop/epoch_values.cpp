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
  loss_samples.clear();
  names.clear();
  metrics.clear();
  metric_samples.clear();
  logged_loss = 0;
  logged_metric.clear();
}

void EpochValues::add_loss(const at::Tensor& v, std::int64_t samples) {
  losses.push_back(v.detach());
  loss_samples.push_back(static_cast<double>(samples));
}

void EpochValues::add_metric(const std::string& name, const at::Tensor& v, std::int64_t samples) {
  std::size_t k = 0;
  while (k < names.size() && names[k] != name) ++k;
  if (k == names.size()) {
    names.push_back(name);
    metrics.emplace_back();
    metric_samples.emplace_back();
    logged_metric.push_back(0);
  }
  metrics[k].push_back(v.detach());
  metric_samples[k].push_back(static_cast<double>(samples));
}

void EpochValues::mark_logged() {
  logged_loss = losses.size();
  for (std::size_t k = 0; k < names.size(); ++k) logged_metric[k] = metrics[k].size();
}

namespace {

at::Tensor as_tensor(const std::vector<double>& v) {
  return at::tensor(at::ArrayRef<double>(v), at::kDouble);
}

// The counts saved with `values`, or `fallback` each where the checkpoint has none.
std::vector<double> samples_of(const StateDict& in, const std::string& key, std::size_t values,
                               std::int64_t fallback) {
  std::vector<double> out(values, static_cast<double>(fallback));
  if (!in.has(key)) return out;
  const auto t = in.get_tensor(key).to(at::kDouble).contiguous();
  if (t.dim() != 1 || static_cast<std::size_t>(t.size(0)) != values)
    throw std::runtime_error("loop state: " + key + " does not match its values");
  const double* p = t.data_ptr<double>();
  out.assign(p, p + values);
  return out;
}

}  // namespace

void EpochValues::save(StateDict& out) const {
  if (!losses.empty()) {
    out.set_tensor("epoch_losses", at::stack(losses));
    out.set_tensor("epoch_loss_samples", as_tensor(loss_samples));
  }
  out.set_int("logged_upto", static_cast<std::int64_t>(logged_loss));
  out.set_int("metrics", static_cast<std::int64_t>(names.size()));
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto i = std::to_string(k);
    out.set_string("metric_name." + i, names[k]);
    if (!metrics[k].empty()) {
      out.set_tensor("metric_values." + i, at::stack(metrics[k]));
      out.set_tensor("metric_samples." + i, as_tensor(metric_samples[k]));
    }
    out.set_int("metric_logged." + i, static_cast<std::int64_t>(logged_metric[k]));
  }
}

void EpochValues::load(const StateDict& in, std::int64_t batch_size) {
  clear();
  auto unstack = [](const at::Tensor& t) {
    std::vector<at::Tensor> v;
    for (std::int64_t i = 0; i < t.size(0); ++i) v.push_back(t[i]);
    return v;
  };
  if (in.has("epoch_losses")) losses = unstack(in.get_tensor("epoch_losses"));
  loss_samples = samples_of(in, "epoch_loss_samples", losses.size(), batch_size);
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
    metric_samples.push_back(
        samples_of(in, "metric_samples." + i, metrics.back().size(), batch_size));
    logged_metric.push_back(std::min(
        static_cast<std::size_t>(std::max<std::int64_t>(0, in.get_int("metric_logged." + i))),
        metrics.back().size()));
  }
}

}  // namespace wick
