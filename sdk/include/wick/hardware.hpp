// Since SDK 2.4: what this machine's processors run natively, for plugins that choose a
// precision or a kernel from it (mixed_precision's dtype = "auto") and for `wick doctor`.
// Torch-free.
#pragma once

#include <string>

#include "wick/run.hpp"
#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// The x86 vector and matrix extensions that decide how fast LibTorch's CPU kernels are, as
// the kernel reports them (/proc/cpuinfo: a feature the OS does not enable is not listed).
struct CpuFeatures {
  std::string model;         // "model name", e.g. "Intel(R) Xeon(R) Platinum 8480+"
  bool avx2 = false;         // 256-bit vectors: LibTorch's AVX2 kernels
  bool avx512f = false;      // 512-bit vectors: LibTorch's AVX512 kernels
  bool avx512_bf16 = false;  // bf16 dot products (Cooper Lake, Sapphire Rapids, Zen 4)
  bool amx_tile = false;     // AMX tiles (Sapphire Rapids)
  bool amx_bf16 = false;     // AMX bf16 matrix products
  // Since SDK 2.9: the features the environment variable WICK_CPU_DISABLE hides (comma
  // separated, as /proc/cpuinfo names them; "" when none). A hidden feature reads false above,
  // so a machine can run the paths of a CPU that lacks it (README: CPU paths).
  std::string hidden;
  // bf16 matrix products and convolutions run in hardware, not emulated through fp32.
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
};
WICK_EXPORT const CpuFeatures& cpu_features();

// The CPU features WICK_CPU_DISABLE may hide, as /proc/cpuinfo names them. Hiding avx512f
// hides the AVX-512 features after it; hiding amx_tile hides amx_bf16.
inline constexpr const char* kCpuFeatureNames[] = {"avx2", "avx512f", "avx512_bf16", "amx_tile",
                                                   "amx_bf16"};

// The CPU kernels LibTorch dispatches its own operators to: "DEFAULT", "AVX2" or "AVX512"
// (Debian's LibTorch 1.13 picks AVX2 by default; ATEN_CPU_CAPABILITY=avx512 selects AVX-512).
// Convolutions and matrix products go through oneDNN and BLAS, which choose for themselves.
WICK_EXPORT std::string torch_cpu_capability();

// Whether bf16 runs natively on a device: on the CPU, AVX512-BF16 or AMX-BF16; on CUDA, compute
// capability 8.0 and newer (false for a GPU this process has not loaded wick's CUDA side for,
// as a run on the CPU does not, and for an index past the GPUs).
WICK_EXPORT bool native_bf16(const Device& d);

}  // namespace wick

WICK_PUBLIC_END
