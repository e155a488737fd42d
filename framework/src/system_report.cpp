// system_report(), the one part of the system facts that needs LibTorch; system.cpp stays
// torch-free so that the loader links without it (the fuzz build, fuzz/CMakeLists.txt).
#include "wick/system.hpp"

#include <torch/torch.h>
#include <torch/version.h>

#include <thread>

namespace wick {

SystemReport system_report() {
  SystemReport r;
  {
    // A product big enough to go to BLAS (sgemm), should a build load it lazily.
    torch::NoGradGuard g;
    auto a = torch::ones({8, 8});
    (void)a.mm(a);
  }
  r.torch_version = TORCH_VERSION;
  r.intra_op_threads = at::get_num_threads();
  r.inter_op_threads = at::get_num_interop_threads();
  r.hardware_threads = std::thread::hardware_concurrency();
  r.cuda_available = torch::cuda::is_available();
  r.cuda_devices = r.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  r.blas_path = loaded_blas();
  r.blas = classify_blas_path(r.blas_path);
  return r;
}

}  // namespace wick
