// system_report(), the one part of the system facts that needs LibTorch; system.cpp stays
// torch-free so that the loader links without it (the fuzz build, fuzz/CMakeLists.txt).
#include "wick/system.hpp"

#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <thread>

#include "cuda/cuda_load.hpp"
#include "loop/flops.hpp"

namespace wick {

namespace {

// A value of at::show_config()'s "Build settings: KEY=value, ..." line ("" when absent).
std::string build_setting(const std::string& config, const std::string& key) {
  const auto at = config.find(" " + key + "=");
  if (at == std::string::npos) return {};
  const auto from = at + key.size() + 2;
  return config.substr(from, config.find_first_of(",\n", from) - from);
}

}  // namespace

SystemReport system_report() {
  SystemReport r;
  // Loaded first: LibTorch keeps the answer of its first question about CUDA.
  if (cuda::compiled()) {
    r.cuda_missing = cuda::load();
    if (r.cuda_missing.empty()) r.cuda_runtime = at::detail::getCUDAHooks().versionCUDART();
  }
  {
    // A product big enough to go to BLAS (sgemm), should a build load it lazily.
    torch::NoGradGuard g;
    auto a = torch::ones({8, 8});
    (void)a.mm(a);
  }
  r.torch_version = TORCH_VERSION;
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&at::get_num_threads), &where) && where.dli_fname)
    r.torch_library = where.dli_fname;
  r.intra_op_threads = at::get_num_threads();
  r.inter_op_threads = at::get_num_interop_threads();
  r.hardware_threads = std::thread::hardware_concurrency();
  r.cuda_available = cuda::loaded() && torch::cuda::is_available();
  r.cuda_devices = r.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  r.blas_path = loaded_blas();
  r.blas = classify_blas_path(r.blas_path);
  const auto config = at::show_config();
  r.blas_info = build_setting(config, "BLAS_INFO");
  r.cuda_version = build_setting(config, "CUDA_VERSION");
  return r;
}

double measure_peak_gflops(double seconds, bool bf16) {
  // Products of 512 x 512 matrices (268 MFLOP each) on the current threads, the best of the
  // repetitions: what the BLAS (or oneDNN, for bf16) reaches on dense work.
  constexpr std::int64_t n = 512;
  MatmulShape square{1, n, n, n, static_cast<int>(bf16 ? at::kBFloat16 : at::kFloat), false};
  return probe_peak_gflops({square}, /*with_backward=*/false, seconds);
}

}  // namespace wick
