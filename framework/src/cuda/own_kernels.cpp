// cuda/own_kernels.hpp: WICK_CUDA_DISABLE, parsed and kept.
#include "cuda/own_kernels.hpp"

#include <atomic>
#include <cstdlib>

#include "system/name_list.hpp"
#include "wick/system.hpp"

namespace wick::cuda {
namespace {

constexpr unsigned kAll = (1u << kOwnKernels) - 1;

// Read on the first question: the first step of a run, or `wick`'s check at start.
std::atomic<unsigned>& current() {
  static std::atomic<unsigned> set{hidden_own_kernels()};
  return set;
}

}  // namespace

unsigned parse_own_kernels(const std::string& text) {
  unsigned set = 0;
  for (const auto& name : comma_names(text))
    set |= name == "all" ? kAll
                         : 1u << index_of_name("WICK_CUDA_DISABLE", name, kOwnKernelNames,
                                               "one of wick's CUDA kernels", " (or all)");
  return set;
}

std::string own_kernel_names(unsigned set, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < kOwnKernels; ++i)
    if (set & (1u << i)) out += std::string(out.empty() ? "" : separator) + kOwnKernelNames[i];
  return out;
}

unsigned hidden_own_kernels() {
  static const unsigned set = [] {
    const char* env = std::getenv("WICK_CUDA_DISABLE");
    return env ? parse_own_kernels(env) : 0u;
  }();
  return set;
}

bool hidden(OwnKernel k) {
  return (current().load(std::memory_order_relaxed) >> static_cast<unsigned>(k)) & 1u;
}

void set_hidden_own_kernels(unsigned set) {
  current().store(set & kAll, std::memory_order_relaxed);
}

}  // namespace wick::cuda

namespace wick {

std::string hidden_cuda_kernels() {
  return cuda::own_kernel_names(cuda::hidden_own_kernels(), ",");
}

}  // namespace wick
