// `wick doctor`: is this machine set up to train fast? Prints the BLAS LibTorch calls, the
// thread counts, the CPU's vector and matrix extensions and LibTorch's kernels for them, the
// peak fp32 matrix-product rate, the LibTorch version, CUDA, the plugin folders, what to
// enable for speed, and what to fix. Exit code 0 when there is nothing to fix, 1 otherwise
// (what to enable is advice: it does not change the exit code).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "commands.hpp"
#include "wick/build_info.hpp"
#include "wick/hardware.hpp"
#include "wick/loader.hpp"
#include "wick/system.hpp"

namespace fs = std::filesystem;

namespace wick::cli {

namespace {

int cmd_doctor(const std::vector<std::string>& plugin_paths) {
  return guarded([&] {
    std::vector<std::string> fixes;
    const auto sys = wick::system_report();

    std::printf("wick       %s\n", WICK_VERSION);
    std::printf("LibTorch   %s (%s): %s\n", sys.torch_version.c_str(),
                sys.cuda_version.empty() ? "CPU only" : ("CUDA " + sys.cuda_version).c_str(),
                sys.torch_library.c_str());
    const std::string blas_info = sys.blas_info.empty() ? "" : " (" + sys.blas_info + ")";
    std::printf("BLAS       %s%s: %s\n", std::string(wick::to_string(sys.blas)).c_str(),
                sys.blas == wick::BlasKind::bundled ? blas_info.c_str() : "",
                sys.blas_path.empty() ? "(no BLAS library mapped)" : sys.blas_path.c_str());
    if (sys.blas == wick::BlasKind::reference)
      fixes.push_back(
          "LibTorch calls Debian's reference BLAS, which trains about 15x slower: install "
          "OpenBLAS (sudo apt-get install libopenblas0-openmp; scripts/install-deps.sh does), or "
          "select an installed one with sudo update-alternatives --config "
          "libblas.so.3-x86_64-linux-gnu");
    if (sys.blas == wick::BlasKind::none)
      fixes.push_back(
          "cannot tell which BLAS LibTorch uses (no libblas mapped); check `ldd` on "
          "libtorch_cpu.so");

    std::printf("Threads    %d intra-op, %d inter-op, %u hardware threads", sys.intra_op_threads,
                sys.inter_op_threads, sys.hardware_threads);
    const char* omp = std::getenv("OMP_NUM_THREADS");
    if (omp) std::printf(" (OMP_NUM_THREADS=%s)", omp);
    std::printf("\n");
    std::string why;
    const int chosen = wick::auto_threads(&why);
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    std::printf("           trainer.threads = \"auto\" takes %d now (%s); OMP_WAIT_POLICY %s\n",
                chosen, why.c_str(), wait && *wait ? wait : "unset (OpenMP spins, then sleeps)");
    // LibTorch's default is one thread per physical core, so fewer threads than hardware
    // threads is normal (hyper-threads); more is oversubscription.
    const int hw = static_cast<int>(sys.hardware_threads);
    if (hw > 0 && sys.intra_op_threads > hw)
      fixes.push_back("more intra-op threads (" + std::to_string(sys.intra_op_threads) +
                      ") than hardware threads (" + std::to_string(hw) +
                      "): oversubscribed threads slow training; unset OMP_NUM_THREADS or set "
                      "trainer.threads <= " +
                      std::to_string(hw));

    std::vector<std::string> enable;
    const auto& cpu = wick::cpu_features();
    auto yes = [](bool b) { return b ? "yes" : "no"; };
    std::printf("CPU        %s\n", cpu.model.empty() ? "(model not reported)" : cpu.model.c_str());
    std::printf(
        "           AVX2 %s, AVX-512 %s, AVX512-BF16 %s, AMX %s (AMX-BF16 %s); LibTorch's "
        "own kernels: %s\n",
        yes(cpu.avx2), yes(cpu.avx512f), yes(cpu.avx512_bf16), yes(cpu.amx_tile), yes(cpu.amx_bf16),
        wick::torch_cpu_capability().c_str());
    if (!cpu.hidden.empty())
      std::printf(
          "           hidden by WICK_CPU_DISABLE: %s (wick runs as if this CPU lacked them)\n",
          cpu.hidden.c_str());
    if (cpu.native_bf16())
      enable.push_back(
          "bf16: this CPU runs it natively (" +
          std::string(cpu.amx_bf16 ? "AMX-BF16" : "AVX512-BF16") +
          "): [[hooks]] plugin = \"mixed_precision\" (its default dtype = \"auto\" picks bf16 "
          "here) trains matrix products and convolutions in bf16");
    else
      enable.push_back(
          "bf16 is not native on this CPU (no AVX512-BF16 or AMX-BF16), so it would be "
          "emulated and slower than fp32: mixed_precision with dtype = \"auto\" keeps fp32 "
          "here");
    enable.push_back(
        "convolution models: [[hooks]] plugin = \"channels_last\" (oneDNN's fast layout); "
        "samples/fashion_mnist/cnn.toml ships with it and mixed_precision");
    if (!cpu.avx2)
      enable.push_back(
          "this CPU has no AVX2: LibTorch runs its generic kernels, several times slower than "
          "on an AVX2 machine; nothing in wick can make up for it");

    // The probe a fit runs (trainer.peak_gflops = 0) when a step's matrix products are not
    // most of its work; on its own products otherwise.
    std::printf("Peak       %.1f GFLOP/s fp32 matrix product", wick::measure_peak_gflops());
    if (cpu.native_bf16())
      std::printf(", %.1f GFLOP/s bf16", wick::measure_peak_gflops(wick::kPeakProbeSeconds, true));
    std::printf(" on %d thread(s) (%.2f s probe each)\n", sys.intra_op_threads,
                wick::kPeakProbeSeconds);

    if (sys.cuda_available)
      std::printf("CUDA       available, %d device(s), runtime %ld\n", sys.cuda_devices,
                  sys.cuda_runtime);
    else if (!sys.cuda_missing.empty() && !sys.cuda_version.empty())
      std::printf("CUDA       not available: %s; it trains on the CPU: trainer.device = \"cpu\"\n",
                  sys.cuda_missing.c_str());
    else if (!sys.cuda_version.empty())
      std::printf(
          "CUDA       not available: this LibTorch is built for CUDA %s (runtime %ld loaded) but "
          "finds no GPU (no NVIDIA device or driver); it trains on the CPU: trainer.device = "
          "\"cpu\"\n",
          sys.cuda_version.c_str(), sys.cuda_runtime);
    else
      std::printf(
          "CUDA       not available (this LibTorch runs on the CPU: trainer.device = \"cpu\")\n");
    if (const auto hidden = wick::hidden_cuda_kernels(); !hidden.empty())
      std::printf(
          "           hidden by WICK_CUDA_DISABLE: %s (LibTorch's operators in place of "
          "wick's CUDA kernels)\n",
          hidden.c_str());

    const char* env = std::getenv("WICK_PLUGIN_PATH");
    std::printf("Plugins    WICK_PLUGIN_PATH=%s\n", env ? env : "(unset)");
    if (env) {
      std::string s = env;
      std::size_t start = 0;
      while (start <= s.size()) {
        auto end = s.find(':', start);
        if (end == std::string::npos) end = s.size();
        const std::string entry = s.substr(start, end - start);
        if (!entry.empty() && !fs::path(entry).is_absolute())
          fixes.push_back("WICK_PLUGIN_PATH entry '" + entry +
                          "' is relative and is ignored (it would depend on the current "
                          "folder); give an absolute path");
        start = end + 1;
      }
    }
    wick::PluginFinder finder(wick::plugin_search_path(absolute_all(plugin_paths)));
    for (const auto& d : finder.dirs()) {
      std::error_code ec;
      const bool exists = fs::is_directory(d, ec);
      std::printf("           %s%s\n", d.c_str(), exists ? "" : "  (missing)");
    }
    auto scan = finder.scan();
    std::printf("           %zu plugin(s) found:", scan.plugins.size());
    for (const auto& lib : scan.plugins) std::printf(" %s", lib->info().name.c_str());
    std::printf("\n");
    for (const auto& p : scan.problems) fixes.push_back(p);
    if (scan.plugins.empty())
      fixes.push_back(
          "no plugins found: build them (make build) or point WICK_PLUGIN_PATH at their folder");

    std::printf("\nTo enable for speed:\n");
    for (const auto& e : enable) std::printf("  - %s\n", e.c_str());
    if (fixes.empty()) {
      std::printf("\nNothing to fix.\n");
      return kOk;
    }
    std::printf("\nWhat to fix:\n");
    for (const auto& f : fixes) std::printf("  - %s\n", f.c_str());
    return kFailed;
  });
}

}  // namespace

void add_doctor_command(CLI::App& app, Registry& r) {
  static std::vector<std::string> plugin_paths;
  auto* doctor = app.add_subcommand(
      "doctor",
      "check the set-up: BLAS, threads, CPU features (AVX2, AVX-512, AVX512-BF16, AMX) and "
      "LibTorch's kernels, peak GFLOP/s, LibTorch, CUDA, plugin folders; say what to enable "
      "and what to fix (exit 1 when there is something to fix)");
  doctor
      ->add_option("--plugin-path", plugin_paths,
                   "a folder of plugins to search too (one name in two folders is an error)")
      ->type_name("DIR");
  r.push_back({doctor, [] { return cmd_doctor(plugin_paths); }});
}

}  // namespace wick::cli
