// Private: the launch checks of wick's CUDA kernels (*.cu). A fault of an earlier kernel (an
// illegal address) sticks and is returned by every CUDA call after it, so a check after a
// launch alone would blame the kernel just launched. Each launch function therefore takes
// what is pending before its first launch and names it as earlier; a fault found after a
// launch may still be an earlier kernel's that ran meanwhile, and the message says so.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace wick::cuda {

// Before launching `kernel` (its name, "the CUDA Adam kernel"): throws when an earlier kernel
// or CUDA call left an error, saying it is not this kernel's. The error is taken (cleared, where
// it does not stick), so that the next check does not report it again.
inline void check_before_launch(const char* kernel) {
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw std::runtime_error(std::string("wick: an earlier CUDA kernel or call failed, before ") +
                             kernel + " was launched: " + cudaGetErrorString(e));
}

// After launching it: throws when the launch failed (its configuration), or a fault of the
// device came up meanwhile (this kernel's, or one queued before it).
inline void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return;
  // A GPU older than the architectures wick was built for (TORCH_CUDA_ARCH_LIST: a Turing or
  // Volta card with the default list) has no code for any of wick's kernels.
  if (e == cudaErrorNoKernelImageForDevice)
    throw std::runtime_error(std::string("wick: ") + kernel + " has no code for this GPU (" +
                             cudaGetErrorString(e) +
                             "): build wick with TORCH_CUDA_ARCH_LIST naming its compute "
                             "capability, or set WICK_CUDA_DISABLE=all to use LibTorch's "
                             "operators in place of wick's kernels");
  throw std::runtime_error(std::string("wick: ") + kernel + " failed to launch, or the GPU " +
                           "faulted since the check before it: " + cudaGetErrorString(e));
}

}  // namespace wick::cuda
