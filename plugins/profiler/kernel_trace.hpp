// The profiler's GPU kernel table: which CUDA kernels a window of training steps ran, and for
// how long on the GPU (CUPTI, through LibTorch's Kineto profiler), against the window's wall
// time, so that a table also says whether the GPU was kept busy or waited for the host.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace wick_profiler {

class KernelTrace {
 public:
  // Whether this LibTorch can trace kernels (2.x; LibTorch 1.13 builds have no CUDA here).
  static bool available();

  // Both where Result is complete: clang builds the implicit constructor's clean-up of
  // result_ where it is used.
  KernelTrace();
  ~KernelTrace();
  // Waits for the GPU, then starts collecting every kernel it runs. Throws on failure.
  void start();
  // Waits for the GPU, stops, and returns the table: the `top` kernels by GPU time (0: all),
  // per traced step, for `steps` steps.
  std::string stop(std::int64_t steps, std::int64_t top);
  bool running() const { return thread_.joinable(); }

 private:
  struct Result;
  // The trace runs on a thread of its own: LibTorch keeps a profiler's state per thread, in the
  // slot where the training thread has wick's memory counter (--profile), and refuses or
  // misreads a second one there. CUPTI sees every thread's kernels all the same.
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool started_ = false, stopping_ = false;
  std::string error_;
  std::unique_ptr<Result> result_;
  std::chrono::steady_clock::time_point since_;
};

}  // namespace wick_profiler
