// How a fit is asked to stop: signal handlers, the interrupt flag, stop requests.
#include "loop/stop_signals.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "loop/crash_report.hpp"
#include "wick/interrupt.hpp"
#include "wick/state_dict.hpp"
#include "wick/trainer.hpp"

namespace wick {

namespace {

// The first stop signal's number (0: none), how many have come, and the process that sent
// the first (0: the kernel, as for a terminal's Ctrl-C).
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_count{0};
std::atomic<pid_t> g_first_sender{0};
std::atomic<bool> g_exit_on_stop{false};  // an ExitOnStopScope lives
std::atomic<bool> g_handling{false};      // a StopSignalScope lives: a fit's signals are ours

// Plain literals: the handler reads them.
const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "SIGUSR1";
  }
}

void on_stop_signal(int sig, siginfo_t* info, void*) {
  if (g_exit_on_stop.load()) _exit(128 + sig);
  const pid_t from = info ? info->si_pid : 0;
  const int before = g_stop_count.fetch_add(1);
  if (before == 0) {
    g_first_sender.store(from);
    int none = 0;
    g_stop_signal.compare_exchange_strong(none, sig);
    return;
  }
  // A second signal from the first one's sender, or a third: the user (or the scheduler)
  // wants out now. A second from another sender is the same stop delivered twice: SLURM
  // signals every process of a job, and wick launch forwards what it gets to its ranks too.
  if (before >= 2 || from == g_first_sender.load()) {
    CrashReportScope::report_exit_now(signal_name(sig));
    _exit(128 + sig);
  }
}

}  // namespace

// SIGINT (Ctrl-C), SIGTERM (preemption: SLURM, Kubernetes, docker stop), SIGHUP (the terminal
// went away) and SIGUSR1 (SLURM's warning before a job's end) all ask for a stop at the next
// step boundary, so that the cancel checkpoint and a truthful summary.json get written.
StopSignalScope::StopSignalScope() {
  struct sigaction sa {};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &old_[i]);
  g_handling.store(true);
}

StopSignalScope::~StopSignalScope() {
  g_handling.store(false);
  for (std::size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &old_[i], nullptr);
}

ExitOnStopScope::ExitOnStopScope() : outer_(g_exit_on_stop.exchange(true)) {
  // A signal this fit's handler took before the wait began (outside a fit, the flag may be
  // an earlier fit's, and signals end the process as they always do).
  if (const int sig = g_stop_signal.load(); sig != 0 && g_handling.load()) {
    std::fflush(nullptr);
    _exit(128 + sig);
  }
}

ExitOnStopScope::~ExitOnStopScope() {
  g_exit_on_stop.store(outer_);
}

std::string stop_signal_reason(int sig) {
  const char* what = sig == SIGTERM   ? "terminated"
                     : sig == SIGHUP  ? "hung up"
                     : sig == SIGUSR1 ? "asked to stop"
                                      : "interrupted";
  return std::string(what) + " (" + signal_name(sig) + ")";
}

bool interrupt_requested() {
  return g_stop_signal.load(std::memory_order_relaxed) != 0;
}
int interrupt_signal() {
  return g_stop_signal.load(std::memory_order_relaxed);
}
void request_interrupt(int sig) {
  g_first_sender.store(getpid());  // as if raised
  g_stop_signal.store(sig);
  g_stop_count.store(1);
}
void adopt_interrupt(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}
void clear_interrupt() {
  g_stop_signal.store(0);
  g_stop_count.store(0);
  g_first_sender.store(0);
}

void StopRequests::save(StateDict& out, bool keep_pending) const {
  out.set_int("cancelled_steps", cancelled_steps);
  out.set_int("cancelled_epochs", cancelled_epochs);
  // A hook's request the loop acted on (the fit ends here) is kept as well: a restart from
  // the checkpoint the stopped fit ended with must not train on.
  if (requested && by_hook && (acted || keep_pending)) {
    out.set_string("pending_stop", reason);
    out.set_int("pending_stop_epochs", epochs);
    out.set_int("pending_stop_max_steps", max_steps);
  }
}
void StopRequests::load(const StateDict& in) {
  cancelled_steps = in.get_int("cancelled_steps");
  cancelled_epochs = in.get_int("cancelled_epochs");
  if (in.has("pending_stop") && in.get_int("pending_stop_epochs") == epochs &&
      in.get_int("pending_stop_max_steps") == max_steps) {
    reason = in.get_string("pending_stop");
    requested = by_hook = restored = true;
  }
}

}  // namespace wick
