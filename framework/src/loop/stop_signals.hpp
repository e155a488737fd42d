// Private: how a fit is asked to stop. The stop signals (SIGINT, SIGTERM, SIGHUP, SIGUSR1)
// ask through a process-wide flag (wick/interrupt.hpp) that the loop polls at step
// boundaries; hooks and max_steps ask through StopRequests, which data-parallel ranks agree
// on before acting. Cancellations (CancelStep, CancelEpoch) are counted here too.
#pragma once

#include <csignal>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace wick {

class StateDict;
struct CancelInfo;

// Installs the stop-signal handlers for the duration of a fit and restores the previous ones.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
  struct sigaction old_[std::size(kSignals)]{};
};

// "interrupted (SIGINT)", "terminated (SIGTERM)", ...: summary.json's stop_reason.
std::string stop_signal_reason(int sig);

// Thrown at a step boundary when a stop signal came; fit() ends the run cancelled.
struct Interrupted {};

// A fit's stop requests and cancellation counts (the counts go into checkpoints).
struct StopRequests {
  bool requested = false;
  std::string reason;  // the first request's
  std::int64_t cancelled_steps = 0, cancelled_epochs = 0;
  const CancelInfo* cancel = nullptr;  // what after_cancel hooks hear of, while they run

  void request(std::string_view why) {
    if (!requested) reason = std::string(why);
    requested = true;
  }
  void save(StateDict& out) const;
  void load(const StateDict& in);
};

}  // namespace wick
