// Test plugin: fault injection. At lifecycle point `point`, on its call number `step`
// (counting from 0; step-level points count training calls only), it does `action`:
//   throw         throws std::runtime_error
//   cancel_step   throws wick::CancelStep     cancel_epoch / cancel_fit: likewise
//   sigint        raises SIGINT in the process (what a first Ctrl-C does)
//   stop          asks the trainer to stop gracefully
//   pause         writes the file `marker`, then waits (up to 60 s) for a SIGINT to arrive,
//                 so that a test can send a real one at a known place
//   hang          writes `marker`, then waits forever (only a second SIGINT ends the run)
//   slow          sleeps `ms` milliseconds at every call from `step` on (a run slow enough to
//                 be watched or killed mid-way)
//   connect       throws std::runtime_error from connect(), at start (point and step unused)
#include <wick/context.hpp>
#include <wick/interrupt.hpp>
#include <wick/plugin.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace {

class Thrower : public wick::Hook {
 public:
  explicit Thrower(const wick::Params& p)
      : step_(p.get_int("step")),
        ms_(p.get_int("ms")),
        action_(p.get_string("action")),
        marker_(p.get_string("marker")) {
    auto pt = wick::point_from_string(p.get_string("point"));
    if (!pt) throw p.error("point", "is not a lifecycle point");
    point_ = *pt;
    static const char* kActions[] = {"throw",  "cancel_step", "cancel_epoch", "cancel_fit",
                                     "sigint", "stop",        "pause",        "hang",
                                     "slow",   "connect"};
    bool known = false;
    for (const char* a : kActions) known = known || action_ == a;
    if (!known) throw p.error("action", "is not one of the actions listed in thrower.cpp");
    if ((action_ == "pause" || action_ == "hang") && marker_.empty())
      throw p.error("marker", "must be set for pause and hang");
  }

  void connect(wick::Registrar& r) override {
    if (action_ == "connect") throw std::runtime_error("thrower: connect throws");
    r.on(point_, [this](wick::Context& c) {
      const bool step_level =
          point_ == wick::Point::before_step || point_ == wick::Point::after_pred ||
          point_ == wick::Point::after_loss || point_ == wick::Point::after_step;
      if (step_level && c.state().validating()) return;
      if (action_ == "slow") {
        if (calls_++ >= step_) std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
        return;
      }
      if (calls_++ != step_) return;
      act(c);
    });
  }

 private:
  void act(wick::Context& c) {
    using namespace std::chrono_literals;
    if (action_ == "throw") throw std::runtime_error("thrower: injected failure");
    if (action_ == "cancel_step") throw wick::CancelStep();
    if (action_ == "cancel_epoch") throw wick::CancelEpoch();
    if (action_ == "cancel_fit") throw wick::CancelFit();
    if (action_ == "sigint") {
      std::raise(SIGINT);
      return;
    }
    if (action_ == "stop") {
      c.request_stop("thrower asked to stop");
      return;
    }
    std::ofstream(marker_) << "waiting\n";
    // Polls the trainer's flag: the signal may be handled on any of the process's threads.
    for (int i = 0; action_ == "hang" || i < 6000; ++i) {
      if (action_ == "pause" && wick::interrupt_requested()) return;
      std::this_thread::sleep_for(10ms);
    }
  }

  wick::Point point_;
  std::int64_t step_, ms_;
  std::string action_, marker_;
  std::int64_t calls_ = 0;
};

}  // namespace

WICK_PLUGIN(Thrower, wick::PluginDef("thrower", "1.0.0", "Test: throws, cancels or interrupts")
                         .order(10)
                         .param_string("point", "after_step", "lifecycle point to act at")
                         .param_int("step", 0, "act on this call of the point (from 0)")
                         .param_string("action", "throw", "see thrower.cpp")
                         .param_int("ms", 0, "slow: milliseconds per call")
                         .param_string("marker", "", "file written before pause and hang"))
