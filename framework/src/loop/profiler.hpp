// Private: the timings of a profiled run (wick/profile.hpp): the phases of each training step,
// each hook at each point, each stage handler's own time. Exists only when a hook asked for
// it; the loop checks for a null Profiler and times nothing otherwise. Torch-free.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "memory/memory_tracker.hpp"
#include "wick/profile.hpp"

namespace wick {

class Profiler {
 public:
  using Clock = std::chrono::steady_clock;
  // The phases of a training step (they cover it, so their sum is the step time less the
  // loop's own bookkeeping), then validation, which is outside the steps.
  enum Phase : std::size_t {
    data,       // drawing the batch from the loader and moving it to the device
    forward,    // the forward stage, handlers included
    loss,       // the task's loss()
    backward,   // the backward stage
    optimizer,  // the optimizer_step and zero_grad stages
    hooks,      // the hooks at the step's points (before_step .. after_step)
    records,    // the step's metrics record, when one is due
    validation,
    kNumPhases
  };

  Profiler();
  // A new row of kind "point" or "stage"; returns its id for add().
  std::size_t add_entry(std::string kind, std::string name);
  void add(std::size_t id, double seconds) {
    auto& e = entries_[id];
    ++e.calls;
    e.total_s += seconds;
  }
  void add_step(double seconds) {
    ++steps_;
    step_s_ += seconds;
  }
  // The Profile as the SDK shows it, rows by total time (largest first).
  Profile snapshot(double fit_s) const;

  // Stage handlers nest (each calls the rest of its chain): a handler's own time is its
  // elapsed time less that of the handlers it called, which they add here.
  double nested_s = 0;
  // The same for phases (PhaseTimer).
  double phase_nested_s = 0;

  // Peak memory per phase, counted while the fit runs (Trainer::fit starts it).
  MemoryTracker memory;

  static double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

 private:
  std::vector<ProfileEntry> entries_;
  std::int64_t steps_ = 0;
  double step_s_ = 0;
};

// Times a scope into a phase when profiling (p non-null); nothing otherwise. Phases nest (a
// manually optimized task's train_step, counted as forward, runs the backward and optimizer
// phases inside it): a phase gets its own time, less the phases timed inside it. A scope left
// by an exception is not counted.
class PhaseTimer {
 public:
  PhaseTimer(Profiler* p, Profiler::Phase ph) : p_(p), ph_(ph) {
    if (!p_) return;
    outer_ = p_->phase_nested_s;
    p_->phase_nested_s = 0;
    mark_ = p_->memory.enter();
    t0_ = Profiler::Clock::now();
  }
  ~PhaseTimer() {
    if (!p_) return;
    const double elapsed = Profiler::since(t0_);
    if (!std::uncaught_exceptions()) p_->add(ph_, elapsed - p_->phase_nested_s);
    p_->phase_nested_s = outer_ + elapsed;
    p_->memory.leave(ph_, mark_);
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  Profiler* p_;
  Profiler::Phase ph_;
  double outer_ = 0;
  MemoryTracker::Mark mark_;
  Profiler::Clock::time_point t0_{};
};

}  // namespace wick
