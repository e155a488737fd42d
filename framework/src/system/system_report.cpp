// system_report(), the one part of the system facts that needs LibTorch; system.cpp stays
// torch-free so that the loader links without it (the fuzz build, fuzz/CMakeLists.txt).
#include "wick/system.hpp"

#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "cuda/cuda_load.hpp"

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
  torch::NoGradGuard g;
  constexpr std::int64_t n = 512;
  const auto o = torch::TensorOptions().dtype(bf16 ? torch::kBFloat16 : torch::kFloat);
  // Fixed values, not random ones: the probe runs inside a fit and must not move the global
  // generator (a resumed run would draw other numbers than an uninterrupted one).
  auto a = torch::full({n, n}, 0.5, o);
  auto b = torch::full({n, n}, 0.25, o);
  auto c = torch::empty({n, n}, o);
  using Clock = std::chrono::steady_clock;
  // Warm-up: threads started, pages touched, the cores' clock up.
  for (const auto t_warm = Clock::now() + std::chrono::milliseconds(50); Clock::now() < t_warm;)
    torch::mm_out(c, a, b);
  const double flops = 2.0 * n * n * n;
  double best = 0;
  const auto t_end = Clock::now() + std::chrono::duration<double>(seconds);
  int reps = 0;
  while (reps < 3 || Clock::now() < t_end) {
    const auto t0 = Clock::now();
    torch::mm_out(c, a, b);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt > 0) best = std::max(best, flops / dt / 1e9);
    if (++reps >= 100000) break;
  }
  return best;
}

}  // namespace wick
