// Private: the timings of a profiled run (wick/profile.hpp): the phases of each training step,
// each hook at each point, each stage handler's own time. Exists only when a hook asked for
// it; the loop checks for a null Profiler and times nothing otherwise. On a GPU the phases and
// steps are timed on the device's timeline (a DeviceClock: CUDA events), since the host only
// queues work there: its clock would time the queueing; unless a hook asked for the host's
// clock (ProfileClock::host), for steps that wait for the host. Hooks and handlers keep the
// host's clock (their own code is host code). Torch-free.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "loop/device_clock.hpp"
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

  explicit Profiler(ProfileClock clock = ProfileClock::device);
  // What a CUDA run's steps and phases are to be timed by (fit_loop installs the device's).
  ProfileClock clock() const { return clock_kind_; }
  // A new row of kind "point" or "stage"; returns its id for add().
  std::size_t add_entry(std::string kind, std::string name);
  void add(std::size_t id, double seconds) {
    auto& e = entries_[id];
    ++e.calls;
    e.total_s += seconds;
  }
  // A training step's start, and its end, which counts it.
  struct StepStart {
    Clock::time_point host;
    std::size_t mark = 0;
  };
  StepStart step_start();
  void add_step(const StepStart& start);

  // Phases and steps timed on the device from now on (a GPU's: cuda::event_clock).
  void use_device_clock(std::unique_ptr<DeviceClock> clock) { clock_ = std::move(clock); }
  // The Profile as the SDK shows it, rows by total time (largest first). Reads the device's
  // marks first (a wait for the device, when it has some).
  Profile snapshot(double fit_s);

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

  // PhaseTimer's device side: a phase's span between two marks, with the phase it nests in.
  bool on_device() const { return clock_ != nullptr; }
  std::size_t open_span(std::size_t id);
  void close_span(std::size_t span, bool counted);

 private:
  // Reads the marks of the spans closed so far into the entries.
  void settle();

  std::vector<ProfileEntry> entries_;
  ProfileClock clock_kind_;
  std::int64_t steps_ = 0;
  double step_s_ = 0;

  struct Span {
    std::size_t id, from, to = 0;
    std::size_t parent;    // kNone at the top
    bool counted = false;  // not left by an exception
  };
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  static constexpr std::size_t kStepId = static_cast<std::size_t>(-2);
  std::unique_ptr<DeviceClock> clock_;
  std::vector<Span> spans_;
  std::size_t open_ = kNone;  // the innermost open span
};

// Times a scope into a phase when profiling (p non-null); nothing otherwise. Phases nest (a
// manually optimized task's train_step, counted as forward, runs the backward and optimizer
// phases inside it): a phase gets its own time, less the phases timed inside it. A scope left
// by an exception is not counted.
class PhaseTimer {
 public:
  PhaseTimer(Profiler* p, Profiler::Phase ph) : p_(p), ph_(ph) {
    if (!p_) return;
    mark_ = p_->memory.enter();
    if (p_->on_device()) {
      span_ = p_->open_span(ph_);
      return;
    }
    outer_ = p_->phase_nested_s;
    p_->phase_nested_s = 0;
    t0_ = Profiler::Clock::now();
  }
  ~PhaseTimer() {
    if (!p_) return;
    if (p_->on_device()) {
      p_->close_span(span_, !std::uncaught_exceptions());
      p_->memory.leave(ph_, mark_);
      return;
    }
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
  std::size_t span_ = 0;
  MemoryTracker::Mark mark_;
  Profiler::Clock::time_point t0_{};
};

}  // namespace wick
