// Private: the loop's clocks: wall time (steady) and the process's CPU time.
#pragma once

#include <chrono>
#include <ctime>

namespace wick {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of the process, all threads: a throughput measure that waiting for a busy
// machine's cores does not distort (summary.json's train_cpu_s).
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace wick
