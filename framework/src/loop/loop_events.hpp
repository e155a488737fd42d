// Private: what the loop's components ask of the dispatcher, as interfaces: the evaluator
// emits points and names the place an error is blamed on; the step engine also runs the stage
// chains and installs their defaults. The dispatcher's adapter is DispatcherPort
// (dispatch.hpp); the components' unit tests give hand-written ones (tests/test_evaluator.cpp,
// tests/test_step_engine.cpp).
#pragma once

#include <functional>
#include <string_view>

#include "wick/points.hpp"

namespace wick {

class Context;
class Profiler;

class LoopEvents {
 public:
  virtual void emit(Point p) = 0;
  // Kept as a view: literals and strings that stay put.
  virtual void set_where(std::string_view where) = 0;

 protected:
  ~LoopEvents() = default;
};

class StageRunner : public LoopEvents {
 public:
  // The default at the end of stage s (the step engine's), which runs on no plugin's behalf.
  virtual void set_terminal(Stage s, std::function<bool(Context&)> fn) = 0;
  // Runs stage s's chain of handlers, then its default; false when a handler ended the chain
  // without running the rest (an optimizer step skipped).
  virtual bool run_stage(Stage s) = 0;
  // The run's timings when a hook asked for them; else null.
  virtual Profiler* profiler() const = 0;
  // After emit(p) threw: whether handlers after the one that threw were left unrun.
  virtual bool left_unrun(Point p) const = 0;

 protected:
  ~StageRunner() = default;
};

}  // namespace wick
