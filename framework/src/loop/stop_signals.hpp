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

// While one lives, a stop signal ends the process at once with 128 + the signal, as does one
// that came before it: for waits on other ranks before a fit trains (the rendezvous), which
// hold nothing to save and would otherwise outlast the signal by the collective timeout.
class ExitOnStopScope {
 public:
  ExitOnStopScope();
  ~ExitOnStopScope();
  ExitOnStopScope(const ExitOnStopScope&) = delete;
  ExitOnStopScope& operator=(const ExitOnStopScope&) = delete;

 private:
  bool outer_;
};

// "interrupted (SIGINT)", "terminated (SIGTERM)", ...: summary.json's stop_reason.
std::string stop_signal_reason(int sig);

// Another rank's stop signal, which the ranks agreed to stop for: this process ends as if it
// had got it, but counts no signal of its own, so that its own copy (the scheduler's, the
// launcher's) is still a first signal, not the second that exits at once.
void adopt_interrupt(int sig);

// Thrown at a step boundary when a stop signal came; fit() ends the run cancelled.
struct Interrupted {};

// A fit's stop requests and cancellation counts, and what of them goes into checkpoints: the
// counts, and a hook's request (early stopping) in the checkpoint the fit ends with, whether
// the loop acted on it or a stop signal came first: the uninterrupted run stopped there, so a
// resume with the same limits (epochs, max_steps) does. A resume with other limits ignores
// it and trains on, as from the end of a stopped run.
struct StopRequests {
  bool requested = false;
  std::string reason;                      // the first request's
  bool by_hook = false;                    // the first request was a hook's (Context::request_stop)
  bool acted = false;                      // the loop stopped for it
  bool restored = false;                   // a checkpoint kept it: the resumed run trains no more
  std::int64_t signal_rank = -1;           // with several ranks, the first whose signal stopped all
  std::int64_t epochs = 0, max_steps = 0;  // this fit's limits, which a kept request names
  std::int64_t cancelled_steps = 0, cancelled_epochs = 0;
  const CancelInfo* cancel = nullptr;  // what after_cancel hooks hear of, while they run

  void request(std::string_view why, bool from_hook = false) {
    if (!requested) {
      reason = std::string(why);
      by_hook = from_hook;
    }
    requested = true;
  }
  // A new fit, to train `fit_epochs` epochs and at most `fit_max_steps` steps: no request yet.
  void start(std::int64_t fit_epochs, std::int64_t fit_max_steps) {
    requested = by_hook = acted = restored = false;
    signal_rank = -1;
    reason.clear();
    epochs = fit_epochs;
    max_steps = fit_max_steps;
  }
  // keep_pending: this checkpoint is the one the fit ends with, where the loop would have
  // acted on a request next (the caller knows; see Trainer::Impl::snapshot_parts). A request
  // the loop acted on is kept whatever keep_pending says.
  void save(StateDict& out, bool keep_pending) const;
  void load(const StateDict& in);
};

}  // namespace wick
