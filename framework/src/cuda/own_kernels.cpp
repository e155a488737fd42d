// cuda/own_kernels.hpp: WICK_CUDA_DISABLE, parsed and kept.
#include "cuda/own_kernels.hpp"

#include <atomic>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

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
  std::istringstream words(text);
  for (std::string word; std::getline(words, word, ',');) {
    word.erase(0, word.find_first_not_of(" \t"));
    word.erase(word.find_last_not_of(" \t") + 1);
    if (word.empty()) continue;
    if (word == "all") {
      set = kAll;
      continue;
    }
    std::size_t i = 0;
    while (i < kOwnKernels && word != kOwnKernelNames[i]) ++i;
    if (i == kOwnKernels)
      throw std::invalid_argument("WICK_CUDA_DISABLE: '" + word +
                                  "' is not one of wick's CUDA kernels; name some of " +
                                  own_kernel_names(kAll) + " (or all), separated by commas");
    set |= 1u << i;
  }
  return set;
}

std::string own_kernel_names(unsigned set) {
  std::string out;
  for (std::size_t i = 0; i < kOwnKernels; ++i)
    if (set & (1u << i)) out += std::string(out.empty() ? "" : ", ") + kOwnKernelNames[i];
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
  return cuda::own_kernel_names(cuda::hidden_own_kernels());
}

}  // namespace wick
