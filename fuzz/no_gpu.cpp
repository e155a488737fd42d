// The fuzz targets build the config sources without LibTorch: trainer.device is resolved here
// as on a machine without a GPU (the library's own, in system/hardware.cpp, asks LibTorch),
// and the CUDA side is that of a CPU-only build (cuda/cuda_support.cpp's).
#include "cuda/cuda_load.hpp"
#include "wick/params.hpp"
#include "wick/system.hpp"

namespace wick {

Device resolve_device(const Device& requested, bool auto_device) {
  if (auto_device) return Device{};
  if (requested.is_cuda())
    throw ConfigError("trainer.device = \"" + requested.str() +
                      "\" but this LibTorch has no CUDA device; use \"cpu\" or \"auto\"");
  return requested;
}

namespace cuda {

bool compiled() {
  return false;
}

std::string load() {
  return "the fuzz targets have no CUDA side";
}

bool loaded() {
  return false;
}

}  // namespace cuda

}  // namespace wick
