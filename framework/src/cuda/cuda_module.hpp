// Private: the functions the CUDA module (libwick_cuda.so, cuda_side.cpp) gives libwick
// (cuda_support.cpp), as one table read through the module's one exported symbol.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cuda/cuda_support.hpp"  // AdamUpdate
#include "loop/device_clock.hpp"
#include "wick/torch_compat.hpp"  // compat::CommBackend

namespace c10d {
class Store;
}  // namespace c10d

namespace wick::cuda {

// The table's version, raised whenever an entry is added, removed or changes its signature:
// a changed signature keeps the table's size.
constexpr std::uint32_t kModuleVersion = 3;

struct Module {
  // sizeof(Module) and kModuleVersion as the module was built: a module left from another build
  // of wick, whose table differs, is refused at load rather than called through the wrong
  // entries.
  std::size_t size;
  std::uint32_t version;
  bool (*capturing)(const at::Device& device);
  bool (*native_bf16)(const at::Device& device);
  at::Tensor (*pinned)(const at::Tensor& host);
  void (*to_device_async)(at::Tensor* tensors, std::size_t n, const at::Device& device);
  void (*adam_steps)(const std::vector<AdamUpdate>& updates);
  std::pair<at::Tensor, at::Tensor> (*cross_entropy_rows)(const at::Tensor& logits,
                                                          const at::Tensor& target,
                                                          std::int64_t ignore_index);
  at::Tensor (*cross_entropy_grad)(const at::Tensor& logits, const at::Tensor& target,
                                   const at::Tensor& lse, const at::Tensor& scale,
                                   std::int64_t ignore_index);
  void (*layer_norm_forward)(const at::Tensor& x, const at::Tensor& branch,
                             const at::Tensor& weight, const at::Tensor& bias, float eps,
                             const at::Tensor& s, const at::Tensor& y, const at::Tensor& mean,
                             const at::Tensor& rstd);
  void (*layer_norm_backward)(const at::Tensor& s, const at::Tensor& dy, const at::Tensor& ds,
                              const at::Tensor& weight, const at::Tensor& mean,
                              const at::Tensor& rstd, const at::Tensor& dx,
                              const at::Tensor& d_branch, const at::Tensor& dw,
                              const at::Tensor& db);
  at::Tensor (*column_sums)(const at::Tensor& g, at::ScalarType type);
  std::pair<at::Tensor, at::Tensor> (*gelu_backward_sums)(const at::Tensor& dh,
                                                          const at::Tensor& pre,
                                                          at::ScalarType sum_type);
  bool (*gelu_gemm_forward)(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                            const at::Tensor& out, const at::Tensor& pre);
  std::unique_ptr<DeviceClock> (*event_clock)(const at::Device& device);
  c10::intrusive_ptr<compat::CommBackend> (*nccl_group)(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
      std::chrono::milliseconds timeout);
};

}  // namespace wick::cuda

// The module's table (the symbol cuda_support.cpp looks up).
#define WICK_CUDA_MODULE_SYMBOL "wick_cuda_module"
extern "C" const wick::cuda::Module* wick_cuda_module();
