#include "kernel_trace.hpp"

#include <wick/torch_compat.hpp>  // TORCH_VERSION_MAJOR

#include <torch/cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace wick_profiler {

struct KernelTrace::Result {
  struct Kernel {
    std::uint64_t ns = 0;
    std::int64_t calls = 0;
  };
  std::map<std::string, Kernel> kernels;
  std::uint64_t busy_ns = 0;  // the kernels' GPU time, summed
};

bool KernelTrace::available() {
  return TORCH_VERSION_MAJOR >= 2;
}

KernelTrace::KernelTrace() = default;

KernelTrace::~KernelTrace() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void KernelTrace::start() {
#if TORCH_VERSION_MAJOR >= 2
  if (running()) return;
  torch::cuda::synchronize();  // the window starts with an idle GPU
  started_ = stopping_ = false;
  error_.clear();
  result_.reset();
  thread_ = std::thread([this] {
    namespace prof = torch::profiler::impl;
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
    const std::set<prof::ActivityType> activities{prof::ActivityType::CUDA};
    std::unique_lock<std::mutex> lock(mutex_);
    try {
      torch::autograd::profiler::prepareProfiler(config, activities);
      torch::autograd::profiler::enableProfiler(config, activities);
    } catch (const std::exception& e) {
      error_ = e.what();
      started_ = stopping_ = true;
      wake_.notify_all();
      return;
    }
    started_ = true;
    wake_.notify_all();
    wake_.wait(lock, [this] { return stopping_; });
    auto result = std::make_unique<Result>();
    try {
      const auto trace = torch::autograd::profiler::disableProfiler();
      for (const auto& e : trace->events()) {
        if (e.deviceType() != c10::DeviceType::CUDA) continue;
        auto& k = result->kernels[e.name()];
        k.ns += e.durationNs();
        ++k.calls;
        result->busy_ns += e.durationNs();
      }
      result_ = std::move(result);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  });
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [this] { return started_; });
  if (!error_.empty()) {
    lock.unlock();
    thread_.join();
    throw std::runtime_error("the CUDA kernel trace did not start: " + error_);
  }
  since_ = std::chrono::steady_clock::now();
#else
  started_ = false;
  throw std::runtime_error("the CUDA kernel table needs LibTorch 2.x");
#endif
}

std::string KernelTrace::stop(std::int64_t steps, std::int64_t top) {
  if (!running()) return "";
  torch::cuda::synchronize();  // every kernel of the window has run
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since_).count();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (!result_) return "  (no kernel table: " + error_ + ")\n";

  std::vector<std::pair<std::string, Result::Kernel>> rows(result_->kernels.begin(),
                                                           result_->kernels.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  if (top > 0 && rows.size() > static_cast<std::size_t>(top)) rows.resize(top);
  const double n = static_cast<double>(std::max<std::int64_t>(steps, 1));
  const double busy_ms = static_cast<double>(result_->busy_ns) / 1e6;
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line,
                "  %lld steps: %.3f ms of wall time per step, the GPU busy %.3f ms of it (%.1f%%) "
                "in %lld kernels and copies\n",
                static_cast<long long>(steps), wall_ms / n, busy_ms / n,
                wall_ms > 0 ? 100.0 * busy_ms / wall_ms : 0.0,
                static_cast<long long>(result_->kernels.size()));
  out += line;
  out += "  ms/step   share  calls/step  kernel\n";
  for (const auto& [name, k] : rows) {
    const double ms = static_cast<double>(k.ns) / 1e6;
    std::snprintf(line, sizeof line, "  %8.3f  %5.1f%%  %10.1f  %.110s\n", ms / n,
                  busy_ms > 0 ? 100.0 * ms / busy_ms : 0.0, static_cast<double>(k.calls) / n,
                  name.c_str());
    out += line;
  }
  return out;
}

}  // namespace wick_profiler
