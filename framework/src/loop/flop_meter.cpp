// The run's FLOP rates: the counted first step, the peak probe, the rates of records.
#include "loop/flop_meter.hpp"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include <ATen/core/ScalarType.h>

#include "wick/metrics.hpp"
#include "wick/system.hpp"

namespace wick {

void FlopMeter::configure(bool enabled, double peak_gflops, ProbeDevice device) {
  enabled_ = enabled;
  device_ = device;
  if (enabled && peak_gflops > 0) peak_ = peak_gflops * 1e9;
}

void FlopMeter::take(const FlopCounter& c) {
  counted_ += c.flops();
  counted_train_ += c.train_flops();
  matmuls_.insert(matmuls_.end(), c.matmuls().begin(), c.matmuls().end());
  if (c.conv_dtype() >= 0) conv_dtype_ = c.conv_dtype();
}

void FlopMeter::step_counted(bool with_backward, std::int64_t next) {
  per_step_ = with_backward ? counted_train_ : counted_;
  probe_due_ = peak_ <= 0 && per_step_ > 0;
  probe_with_backward_ = with_backward;
  if (probe_due_) return;  // probed after the step ends, outside every timer of the step
  matmuls_.clear();
  start_window(next);
}

void FlopMeter::probe(std::int64_t next) {
  probe_due_ = false;
  // The peak is what the run's device reaches on the step's own matrix products (in their
  // dtype, bf16 under autocast) when they are most of its work; else on square products in
  // the convolutions' dtype (larger on a GPU, which small ones leave idle). Probed long enough
  // for a steady clock; its time is no step's.
  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  double products = 0;
  for (const auto& m : matmuls_)
    products += m.flops() * (probe_with_backward_ && m.backward ? 3 : 1);
  const std::int64_t n = device_.cuda ? 4096 : 512;
  const int dtype =
      conv_dtype_ == static_cast<int>(at::kBFloat16) ? conv_dtype_ : static_cast<int>(at::kFloat);
  try {
    peak_ =
        1e9 *
        (products >= 0.5 * per_step_
             ? probe_peak_gflops(matmuls_, probe_with_backward_, kPeakProbeSeconds, device_)
             : probe_peak_gflops({{1, n, n, n, dtype, false}}, false, kPeakProbeSeconds, device_));
  } catch (const std::exception& e) {
    // The run goes on without the share (a GPU without room for the products beside the
    // model's memory).
    const std::string what = e.what();
    std::fprintf(stderr,
                 "wick: warning: the peak for train/flops_utilization could not be probed "
                 "(%s); records leave it out: give trainer.peak_gflops\n",
                 what.substr(0, what.find('\n')).c_str());
    peak_ = 0;
  }
  probe_s_ += seconds_since(t0);
  probe_cpu_s_ += process_cpu_seconds() - c0;
  matmuls_.clear();
  start_window(next);
}

void FlopMeter::start_window(std::int64_t micro) {
  window_t0_ = Clock::now();
  window_micro0_ = micro;
}

void FlopMeter::add_window_rates(Record& r, std::int64_t micro, std::int64_t world) {
  add_rates(r, micro - window_micro0_, seconds_since(window_t0_), world);
  start_window(micro);
}

void FlopMeter::add_rates(Record& r, std::int64_t steps, double seconds, std::int64_t world) const {
  if (per_step_ <= 0 || steps <= 0 || seconds <= 0) return;
  const double mine = per_step_ * static_cast<double>(steps) / seconds;
  r.values.emplace_back("train/flops_per_s", mine * static_cast<double>(world));
  if (peak_ > 0) r.values.emplace_back("train/flops_utilization", mine / peak_);
}

}  // namespace wick
