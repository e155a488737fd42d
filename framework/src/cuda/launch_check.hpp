// Private: the launch checks of wick's CUDA kernels (*.cu). A fault of an earlier kernel (an
// illegal address) sticks and is returned by every CUDA call after it, so a check after a
// launch alone would blame the kernel just launched; each launch first asks what is pending.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace wick::cuda {

// Before launching `kernel` (its name, "the CUDA Adam kernel"): throws when an earlier kernel
// or CUDA call left an error, saying it is not this kernel's.
inline void check_before_launch(const char* kernel) {
  if (const cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
    throw std::runtime_error(std::string("wick: an earlier CUDA kernel or call failed, before ") +
                             kernel + " was launched: " + cudaGetErrorString(e));
}

// After launching it: throws when the launch failed (its configuration, or the device).
inline void check_launch(const char* kernel) {
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw std::runtime_error(std::string("wick: ") + kernel +
                             " failed to launch: " + cudaGetErrorString(e));
}

}  // namespace wick::cuda
