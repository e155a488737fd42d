// CPU features from /proc/cpuinfo (what the kernel enables, unlike a raw CPUID) and
// LibTorch's view of them.
#include "wick/hardware.hpp"

#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <fstream>
#include <sstream>
#include <string>

namespace wick {

namespace {

CpuFeatures read_cpu_features() {
  CpuFeatures f;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  bool have_flags = false;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && f.model.empty()) f.model = value;
    if (key != "flags" || have_flags) continue;
    have_flags = true;  // every core lists the same flags
    std::istringstream words(value);
    for (std::string w; words >> w;) {
      if (w == "avx2") f.avx2 = true;
      if (w == "avx512f") f.avx512f = true;
      if (w == "avx512_bf16") f.avx512_bf16 = true;
      if (w == "amx_tile") f.amx_tile = true;
      if (w == "amx_bf16") f.amx_bf16 = true;
    }
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = read_cpu_features();
  return f;
}

std::string torch_cpu_capability() {
  // The dispatch's choice is not exported by LibTorch 1.13; its configuration text names it.
  static const std::string cap = [] {
    const std::string cfg = at::show_config();
    const std::string key = "CPU capability usage: ";
    const auto at = cfg.find(key);
    if (at == std::string::npos) return std::string("unknown");
    const auto from = at + key.size();
    const std::string cap = cfg.substr(from, cfg.find('\n', from) - from);
    // Named as ATEN_CPU_CAPABILITY names it ("default"), not as the text does.
    return cap == "NO AVX" ? std::string("DEFAULT") : cap;
  }();
  return cap;
}

bool native_bf16(const Device& d) {
  if (d.is_cuda())
    return at::detail::getCUDAHooks().hasCUDA() &&
           at::detail::getCUDAHooks().supportsBFloat16ConvolutionWithCuDNNv8();
  return cpu_features().native_bf16();
}

}  // namespace wick
