// Private: the run's FLOP rates (trainer.flops). The first training step's matrix products
// and convolutions are counted (FlopCounter, flops.hpp); the peak they are compared with is
// given (trainer.peak_gflops) or probed once after that step, on the step's own products;
// step and epoch records then get train/flops_per_s and train/flops_utilization.
#pragma once

#include <cstdint>
#include <vector>

#include "loop/clock.hpp"
#include "loop/flops.hpp"

namespace wick {

struct Record;

class FlopMeter {
 public:
  // enabled: count and log at all; peak_gflops: the peak to compare with (0: probe it on
  // `device`, the run's).
  void configure(bool enabled, double peak_gflops, ProbeDevice device);
  // Whether the step running now is the one to count (no step counted yet).
  bool counting() const { return enabled_ && per_step_ < 0; }
  // Adds what a counter saw to the counted step's operations.
  void take(const FlopCounter& c);
  // The counted step has run its operations: its FLOPs are what take() gathered (x 3 with
  // `with_backward`: the forward's, whose backward is counted as twice their FLOPs). `next`:
  // the micro step after the counted one, where the first rate starts (the counted step did
  // more work than the others).
  void step_counted(bool with_backward, std::int64_t next);
  // After the counted step ends, outside its timers: probe the peak when it was not given.
  bool probe_due() const { return probe_due_; }
  void probe(std::int64_t next);
  // The rates' window starts at micro step `micro`, now.
  void start_window(std::int64_t micro);
  // train/flops_per_s (all `world` ranks) and train/flops_utilization (this rank against the
  // peak) over the window up to micro step `micro`; the next window starts there.
  void add_window_rates(Record& r, std::int64_t micro, std::int64_t world);
  // The same for `steps` steps in `seconds`.
  void add_rates(Record& r, std::int64_t steps, double seconds, std::int64_t world) const;

  double per_step() const { return per_step_ > 0 ? per_step_ : 0.0; }
  double peak_gflops() const { return peak_ / 1e9; }
  // Time the probe took, which no rate or phase counts.
  double probe_seconds() const { return probe_s_; }
  double probe_cpu_seconds() const { return probe_cpu_s_; }

 private:
  bool enabled_ = false;
  ProbeDevice device_;
  // FLOPs per training step of this rank (< 0: not counted yet; 0: nothing countable) and the
  // peak (FLOP/s; 0: not known yet).
  double per_step_ = -1, peak_ = 0;
  double counted_ = 0, counted_train_ = 0;  // FlopCounter::flops and train_flops
  std::vector<MatmulShape> matmuls_;        // the counted step's products, for the probe
  int conv_dtype_ = -1;                     // its convolutions' dtype (-1: none)
  bool probe_due_ = false, probe_with_backward_ = false;
  double probe_s_ = 0, probe_cpu_s_ = 0;
  Clock::time_point window_t0_ = Clock::now();
  std::int64_t window_micro0_ = 0;
};

}  // namespace wick
