#include "memory/memory_tracker.hpp"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>

#include "wick/torch_compat.hpp"

namespace wick {

namespace {

void raise_to(std::atomic<std::int64_t>& peak, std::int64_t v) {
  auto p = peak.load(std::memory_order_relaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

struct MemoryTracker::Counts : c10::MemoryReportingInfoBase {
  std::atomic<std::int64_t> cpu{0}, cpu_peak{0}, cuda{0}, cuda_peak{0};
  std::vector<std::int64_t> phase_cpu, phase_cuda;  // per phase: the highest peak seen
  std::vector<std::int64_t> phase_calls;

  // A free comes with a negative size. CPU: a running sum (the CPU allocator reports the
  // frees of what it reported allocated); CUDA: the caching allocator's total.
  void reportMemoryUsage(void*, std::int64_t size, compat::AllocatorTotal total_allocated,
                         compat::AllocatorTotal, c10::Device d) override {
    if (d.is_cpu()) {
      raise_to(cpu_peak, cpu.fetch_add(size, std::memory_order_relaxed) + size);
    } else if (d.is_cuda()) {
      const auto now = static_cast<std::int64_t>(total_allocated);
      cuda.store(now, std::memory_order_relaxed);
      raise_to(cuda_peak, now);
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
};

MemoryTracker::MemoryTracker(std::vector<std::string> phase_names)
    : names_(std::move(phase_names)), counts_(std::make_shared<Counts>()) {
  counts_->phase_cpu.assign(names_.size(), 0);
  counts_->phase_cuda.assign(names_.size(), 0);
  counts_->phase_calls.assign(names_.size(), 0);
}

MemoryTracker::~MemoryTracker() = default;

std::shared_ptr<void> MemoryTracker::start(std::int64_t base_cpu_bytes) {
  counts_->cpu = base_cpu_bytes;
  counts_->cpu_peak = base_cpu_bytes;
  // The slot torch.profiler uses: a profiler started inside the fit (a Kineto trace) puts its
  // own on top while it runs, and the steps it records are not counted here.
  return std::make_shared<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, counts_);
}

MemoryTracker::Mark MemoryTracker::enter() {
  Mark outer{counts_->cpu_peak.load(), counts_->cuda_peak.load()};
  counts_->cpu_peak = counts_->cpu.load();
  counts_->cuda_peak = counts_->cuda.load();
  return outer;
}

void MemoryTracker::leave(std::size_t phase, const Mark& outer) {
  auto& c = *counts_;
  const auto cpu = c.cpu_peak.load(), cuda = c.cuda_peak.load();
  c.phase_cpu[phase] = std::max(c.phase_cpu[phase], cpu);
  c.phase_cuda[phase] = std::max(c.phase_cuda[phase], cuda);
  ++c.phase_calls[phase];
  raise_to(c.cpu_peak, outer.cpu);
  raise_to(c.cuda_peak, outer.cuda);
}

MemoryProfile MemoryTracker::snapshot() const {
  MemoryProfile m;
  m.enabled = true;
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (counts_->phase_calls[i] > 0)
      m.phases.push_back(
          {names_[i], counts_->phase_calls[i], counts_->phase_cpu[i], counts_->phase_cuda[i]});
  m.peak_rss_bytes = peak_rss_bytes();
  return m;
}

std::int64_t cpu_tensor_bytes(const torch::nn::Module& m) {
  std::int64_t n = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && t.is_cpu()) n += static_cast<std::int64_t>(t.nbytes());
  };
  for (const auto& p : m.parameters()) {
    add(p);
    add(p.grad());
  }
  for (const auto& b : m.buffers()) add(b);
  return n;
}

std::int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  return 0;
}

}  // namespace wick
