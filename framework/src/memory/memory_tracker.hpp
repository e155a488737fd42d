// Private: peak tensor memory per loop phase, for a profiled run (wick/profile.hpp's
// MemoryProfile). LibTorch's allocators report each allocation and free to a memory profiler
// installed on the thread (the CPU allocator's and the CUDA caching allocator's reports, as
// torch.profiler's profile_memory uses them); the tracker is that profiler. CPU: the bytes of
// the tensors the run allocates, over the CPU tensors of the model when it started; CUDA: the
// caching allocator's own count of allocated bytes. Torch-free interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "wick/profile.hpp"

// Exported for the white-box tests (tests/), which link libwick; not an installed header.
WICK_PUBLIC_BEGIN

namespace torch::nn {
class Module;
}

namespace wick {

class MemoryTracker {
 public:
  explicit MemoryTracker(std::vector<std::string> phase_names);
  ~MemoryTracker();
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // Starts counting on the calling thread (and the autograd threads of its backward passes)
  // from `base_cpu_bytes` of CPU tensors; counting stops when the token is destroyed.
  std::shared_ptr<void> start(std::int64_t base_cpu_bytes);

  // The peaks of the scope a phase interrupts, handed back when it ends (phases nest).
  struct Mark {
    std::int64_t cpu = 0, cuda = 0;
  };
  Mark enter();
  void leave(std::size_t phase, const Mark& outer);

  MemoryProfile snapshot() const;

  struct Counts;  // the allocator reports' receiver

 private:
  std::vector<std::string> names_;
  std::shared_ptr<Counts> counts_;
};

// The bytes of a module's CPU parameters, their gradients and its CPU buffers.
std::int64_t cpu_tensor_bytes(const torch::nn::Module& m);

// The process's peak resident set so far (VmHWM), in bytes; 0 where /proc does not say.
std::int64_t peak_rss_bytes();

}  // namespace wick

WICK_PUBLIC_END
