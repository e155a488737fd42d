// CPU features from /proc/cpuinfo (what the kernel enables, unlike a raw CPUID) and
// LibTorch's view of them.
#include "wick/hardware.hpp"

#include <ATen/Version.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

#include "cuda/cuda_load.hpp"
#include "cuda/cuda_support.hpp"
#include "system/name_list.hpp"
#include "wick/cluster.hpp"
#include "wick/params.hpp"  // ConfigError
#include "wick/system.hpp"

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

// WICK_CPU_DISABLE's names, checked; a feature implied by a hidden one is hidden with it.
std::string hidden_features() {
  const char* env = std::getenv("WICK_CPU_DISABLE");
  if (!env) return "";
  bool hide[std::size(kCpuFeatureNames)] = {};
  for (const auto& name : comma_names(env))
    hide[index_of_name("WICK_CPU_DISABLE", name, kCpuFeatureNames, "a CPU feature wick can hide")] =
        true;
  // avx512f hides every AVX-512 feature (and AMX, which no CPU has without it); amx_tile hides
  // amx_bf16.
  if (hide[1]) hide[2] = hide[3] = hide[4] = true;
  if (hide[3]) hide[4] = true;
  if (hide[0]) hide[1] = hide[2] = hide[3] = hide[4] = true;
  std::string out;
  for (std::size_t i = 0; i < std::size(kCpuFeatureNames); ++i)
    if (hide[i]) out += std::string(out.empty() ? "" : ",") + kCpuFeatureNames[i];
  return out;
}

bool hidden(const std::string& list, const char* name) {
  return ("," + list + ",").find("," + std::string(name) + ",") != std::string::npos;
}

CpuFeatures visible_cpu_features() {
  CpuFeatures f = read_cpu_features();
  f.hidden = hidden_features();
  if (hidden(f.hidden, "avx2")) f.avx2 = false;
  if (hidden(f.hidden, "avx512f")) f.avx512f = false;
  if (hidden(f.hidden, "avx512_bf16")) f.avx512_bf16 = false;
  if (hidden(f.hidden, "amx_tile")) f.amx_tile = false;
  if (hidden(f.hidden, "amx_bf16")) f.amx_bf16 = false;
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = visible_cpu_features();
  return f;
}

void apply_cpu_disable() {
  const auto& f = cpu_features();
  if (f.hidden.empty()) return;
  // The most each library may use, named as each names it; a value the user set stays.
  const char* onednn = !f.avx2          ? "SSE41"
                       : !f.avx512f     ? "AVX2"
                       : !f.avx512_bf16 ? "AVX512_CORE_VNNI"
                       : !f.amx_bf16    ? "AVX512_CORE_BF16"
                                        : nullptr;
  if (onednn) {
    setenv("ONEDNN_MAX_CPU_ISA", onednn, 0);
    setenv("DNNL_MAX_CPU_ISA", onednn, 0);  // oneDNN before 2.5 (LibTorch 1.13's is 2.6)
  }
  if (!f.avx512f) {
    setenv("ATEN_CPU_CAPABILITY", f.avx2 ? "avx2" : "default", 0);
    setenv("MKL_ENABLE_INSTRUCTIONS", f.avx2 ? "AVX2" : "SSE4_2", 0);
  }
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

Device device_for_rank(const Device& d, int local_rank, int world, int gpus) {
  if (!d.is_cuda() || d.index >= 0 || world <= 1 || gpus <= 0) return d;
  return {DeviceType::cuda, local_rank % gpus};
}

Device resolve_device(const Device& requested, bool auto_device) {
  if (!auto_device && !requested.is_cuda()) return requested;  // CUDA left unloaded
  const std::string why = cuda::compiled() ? cuda::load() : "";
  const bool has_cuda = why.empty() && torch::cuda::is_available();
  // Each rank of a job on this machine its own GPU: the current one would be GPU 0 for all.
  auto for_this_rank = [](const Device& d) {
    const JobRanks job = job_ranks();
    if (job.world <= 1 || !d.is_cuda()) return d;
    int local = 0;
    try {
      local = detect_cluster_env([](const char* n) { return std::getenv(n); }).local_rank;
    } catch (const std::invalid_argument& e) {
      throw ConfigError(std::string(e.what()) + "; fix the job script or the launcher");
    }
    return device_for_rank(d, local, job.world, static_cast<int>(torch::cuda::device_count()));
  };
  if (auto_device) return has_cuda ? for_this_rank(Device{DeviceType::cuda, -1}) : Device{};
  if (!has_cuda) {
    std::string none =
        "no CUDA device is visible to LibTorch (no GPU or driver here, a CPU "
        "build of LibTorch, or CUDA_VISIBLE_DEVICES hiding them";
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"))
      none += ": it is \"" + std::string(v).substr(0, 60) + "\"";
    throw ConfigError("trainer.device = \"" + requested.str() + "\" but " +
                      (why.empty() ? none + ")" : why) + "; use \"cpu\" or \"auto\"");
  }
  return for_this_rank(requested);
}

void make_current(const Device& d) {
  // Calls that name no device (a task's torch::kCUDA tensors, a device-wide synchronize) act
  // on the thread's current one.
  if (d.is_cuda() && d.index >= 0)
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
        ->setDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(d.index)));
}

bool native_bf16(const Device& d) {
  // An index LibTorch's device type cannot hold names no GPU.
  if (d.is_cuda())
    return d.index >= -1 && d.index <= std::numeric_limits<c10::DeviceIndex>::max() &&
           cuda::native_bf16(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index)));
  return cpu_features().native_bf16();
}

}  // namespace wick
