// Facts about the process and machine: where wick is installed, which BLAS is loaded, the
// thread and LibTorch set-up (`wick doctor`, the warning at the start of `fit`). Torch-free.
#pragma once

#include <string>
#include <string_view>

#include "wick/run.hpp"      // Device
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// Folder of the running executable (resolved through /proc/self/exe).
std::string executable_dir();
// The folder where built-in plugins live: beside libwick, <libdir>/wick/plugins (the wick
// command's <exe>/../lib/wick/plugins; that one where libwick's own file cannot be told).
std::string default_plugin_dir();

// bundled: linked into LibTorch itself (PyPI's wheel links MKL into libtorch_cpu).
enum class BlasKind { none, reference, openblas, other, bundled };
std::string_view to_string(BlasKind k);
// The BLAS library a /proc/<pid>/maps line maps ("" when it maps something else).
std::string blas_path_in_maps_line(std::string_view line);
// Which implementation a mapped BLAS path is. Debian's reference BLAS is the generic
// libblas.so.3 in .../blas/; the fast ones name themselves in their folder or file name.
BlasKind classify_blas_path(std::string_view path);

// The file LibTorch's BLAS calls (sgemm_) bind to, through symlinks, e.g.
// ".../openblas-openmp/libopenblasp-r0.3.21.so" ("" when none), and whether it is Debian's slow
// reference implementation. libtorch_cpu links libblas.so.3 directly, so it is loaded as soon
// as LibTorch is.
std::string loaded_blas();
bool reference_blas_loaded();
// Prints a warning to stderr once when the reference BLAS is in use.
void warn_if_reference_blas();

// Makes glibc keep freed memory for reuse instead of unmapping it (M_TRIM_THRESHOLD 256 MiB,
// M_MMAP_THRESHOLD 32 MiB). With the defaults each training step gives its gradient and
// optimizer temporaries back to the kernel and faults them in again: ~360 page faults per
// step and about a third of the CPU time on the reference workload (wick_bench). `wick` calls
// it at start; a host program may too. Leaves a user's own MALLOC_* / GLIBC_TUNABLES malloc
// settings alone. Returns whether it changed anything.
bool keep_freed_memory();

// WICK_CPU_DISABLE (README: CPU paths) names CPU features to run as if this CPU lacked them:
// wick::cpu_features() hides them (mixed_precision's dtype = "auto", wick doctor), and this
// tells LibTorch's own kernels, oneDNN and MKL to leave them unused too (ATEN_CPU_CAPABILITY,
// ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS; a value set by the user stays). Call it before
// the first tensor operation, as `wick` does at start. A name that is no feature throws
// std::invalid_argument naming the variable and the names it takes.
void apply_cpu_disable();

// WICK_CUDA_DISABLE (README: CUDA paths) names wick's own CUDA kernels to leave unused on a
// GPU, LibTorch's operators in their place: layer_norm, cross_entropy, gelu_mlp, linear, adam,
// bf16_copies, bias_grad, or all (comma separated). Returns the names it hides, checked and
// comma separated ("" for none); a name that is none of them throws std::invalid_argument
// naming the variable and the names it takes. `wick` checks it at start (exit 2).
std::string hidden_cuda_kernels();

// trainer.device as a run uses it: "auto" (auto_device) becomes the current CUDA device where
// this LibTorch sees a GPU, else the CPU. Resolved once, before any plugin is made, so that
// Params::run() and Context::run() agree. A CUDA device without one throws ConfigError.
// Asking for CUDA ("auto" or cuda) loads LibTorch's CUDA side, which a CPU run never loads.
// In a job of several ranks (WORLD_SIZE), a CUDA device without an index ("cuda", "auto")
// becomes each rank's own: GPU LOCAL_RANK modulo the GPUs this process sees (one each when
// the launcher or the job script left a rank one GPU in CUDA_VISIBLE_DEVICES).
Device resolve_device(const Device& requested, bool auto_device);
// That choice: `d` for local rank `local_rank` of `world` ranks on a machine whose process
// sees `gpus` GPUs.
Device device_for_rank(const Device& d, int local_rank, int world, int gpus);
// Makes a CUDA device with an index the calling thread's current one (nothing otherwise), so
// that calls naming no device reach the run's GPU.
void make_current(const Device& d);

// trainer.threads = "auto" (the default). The cores this process may run on (affinity, and a
// cgroup CPU quota) and how many of them were idle over `seconds` (/proc/stat: the sum of
// each allowed core's idle fraction).
struct CoreSample {
  int allowed = 0;
  double free = 0;
};
CoreSample sample_free_cores(double seconds = 0.2);
// The thread count for `cores` shared by `local_ranks` ranks on this machine: the free cores
// (a core counts once three quarters of it is idle), at least 1, at most each rank's share.
int choose_threads(const CoreSample& cores, int local_ranks);
// "auto" now: OMP_NUM_THREADS when the user set it, else choose_threads over a fresh sample
// with LOCAL_WORLD_SIZE's ranks. `why`, when given, says which ("OMP_NUM_THREADS", or e.g.
// "1.02 of 2 cores free").
int auto_threads(std::string* why = nullptr);

struct SystemReport {
  std::string torch_version;  // LibTorch's TORCH_VERSION
  std::string torch_library;  // the file LibTorch's CPU library was loaded from
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  unsigned hardware_threads = 0;
  bool cuda_available = false;
  int cuda_devices = 0;
  std::string cuda_missing;  // why LibTorch's CUDA side did not load ("" if it did, or has none)
  long cuda_runtime = 0;     // the CUDA runtime version the loaded side reports (13000: 13.0)
  std::string blas_path;
  BlasKind blas = BlasKind::none;
  std::string blas_info;     // LibTorch's own word for its BLAS (BLAS_INFO: "mkl", "open")
  std::string cuda_version;  // the CUDA LibTorch was built for ("" without CUDA)
};
// Runs a small matrix product first, so that whatever BLAS LibTorch calls is mapped; loads
// LibTorch's CUDA side (a CUDA build's) to report on it.
SystemReport system_report();

// How long the peak probes run (after a 50 ms warm-up): long enough for the cores to reach
// their steady clock, so that on a quiet machine train/flops_utilization stays at most 1.
inline constexpr double kPeakProbeSeconds = 0.25;
// The matrix-product rate LibTorch reaches on this machine with its current intra-op threads
// (GFLOP/s; the best of repeated 512 x 512 products for about `seconds`), in fp32 or bf16: the
// peak `wick doctor` prints, and the one train/flops_utilization is measured against when a
// step's matrix products are not most of its work (a CNN).
double measure_peak_gflops(double seconds = kPeakProbeSeconds, bool bf16 = false);
// Seconds since this process started (its start time in /proc/self/stat against /proc/uptime;
// 10 ms resolution), or -1 when they cannot be read.
double process_age_seconds();
// The process's peak resident memory so far, in MiB (getrusage).
double peak_rss_mb();

// Ends the process with `code` once the C and C++ standard streams are flushed, without running
// static destructors and atexit handlers: LibTorch's take about 0.1 s of CPU at every exit,
// which each `wick` command (and each test process) would pay for nothing. Call it only where
// nothing else is left open (main's end). A build with AddressSanitizer exits the ordinary way,
// for the leak check that runs at exit.
[[noreturn]] void exit_without_teardown(int code);

}  // namespace wick

WICK_PUBLIC_END
