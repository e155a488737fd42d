// cuda_support.hpp in libwick: loads the CUDA module when a run asks for CUDA and forwards to
// it. WICK_CUDA_MODULE (a CUDA build) is the module's file name, found beside libwick.
#include "cuda/cuda_support.hpp"

#include <dlfcn.h>
#include <torch/version.h>
// compat::CommBackend, complete (nccl_group returns one).
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <stdexcept>

#include "cuda/cuda_module.hpp"

namespace wick::cuda {
namespace {

std::atomic<const Module*> g_module{nullptr};

// The loaded module; every caller got here through a CUDA device, which a run has only after
// resolve_device loaded it.
const Module& module() {
  if (const auto* m = g_module.load()) return *m;
  const auto why = load();
  if (!why.empty()) throw std::runtime_error("wick: a CUDA device without CUDA: " + why);
  return *g_module.load();
}

}  // namespace

bool compiled() {
#ifdef WICK_CUDA_MODULE
  return true;
#else
  return false;
#endif
}

std::string load_module(const std::string& path) {
  static std::mutex m;
  const std::lock_guard<std::mutex> lock(m);
  if (g_module.load()) return "";
  // Local until checked: a refused module's symbols (and its libraries') bind nothing after it.
  // It stays loaded: its libraries (LibTorch's CUDA side) have registered themselves with
  // LibTorch, and unloading them would leave those registrations dangling.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return "LibTorch's CUDA side did not load (" + std::string(err ? err : path) + ")";
  }
  const auto table = reinterpret_cast<const Module* (*)()>(dlsym(handle, WICK_CUDA_MODULE_SYMBOL));
  if (!table) {
    dlerror();  // the lookup's error, reported here instead
    return path + " has no " WICK_CUDA_MODULE_SYMBOL "; rebuild wick";
  }
  const Module* found = table();
  if (found->size != sizeof(Module) || found->version != kModuleVersion)
    return path + " is of another build of wick (its function table differs); rebuild wick";
  // Then global, with its libraries, as a program linked to LibTorch's CUDA libraries would
  // see their symbols (the plugins that use LibTorch's CUDA API bind to them).
  if (!dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL)) {
    const char* err = dlerror();
    return "LibTorch's CUDA side did not load (" + std::string(err ? err : path) + ")";
  }
  g_module.store(found);
  return "";
}

std::string load() {
#ifdef WICK_CUDA_MODULE
  if (g_module.load()) return "";
  // Beside libwick, wherever it is (the build tree, an install, a moved install).
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void*>(&load), &self) || !self.dli_fname)
    return "cannot tell where libwick is, to find " WICK_CUDA_MODULE " beside it";
  return load_module(
      (std::filesystem::path(self.dli_fname).parent_path() / WICK_CUDA_MODULE).string());
#else
  return "this wick is built against a CPU-only LibTorch";
#endif
}

bool loaded() {
  return g_module.load() != nullptr;
}

bool capturing(const at::Device& device) {
  return device.is_cuda() && module().capturing(device);
}

bool native_bf16(const at::Device& device) {
  return device.is_cuda() && loaded() && module().native_bf16(device);
}

at::Tensor pinned(const at::Tensor& host) {
  return compiled() ? module().pinned(host) : host;
}

void to_device_async(at::Tensor* tensors, std::size_t n, const at::Device& device) {
  if (device.is_cuda()) return module().to_device_async(tensors, n, device);
  for (std::size_t i = 0; i < n; ++i)
    if (tensors[i].defined()) tensors[i] = tensors[i].to(device, /*non_blocking=*/true);
}

at::Tensor to_device_async(const at::Tensor& host, const at::Device& device) {
  at::Tensor one = host;
  to_device_async(&one, 1, device);
  return one;
}

void adam_steps(const std::vector<AdamUpdate>& updates) {
  module().adam_steps(updates);
}

std::pair<at::Tensor, at::Tensor> cross_entropy_rows(const at::Tensor& logits,
                                                     const at::Tensor& target,
                                                     std::int64_t ignore_index) {
  return module().cross_entropy_rows(logits, target, ignore_index);
}

at::Tensor cross_entropy_grad(const at::Tensor& logits, const at::Tensor& target,
                              const at::Tensor& lse, const at::Tensor& scale,
                              std::int64_t ignore_index) {
  return module().cross_entropy_grad(logits, target, lse, scale, ignore_index);
}

void layer_norm_forward(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                        const at::Tensor& bias, float eps, const at::Tensor& s, const at::Tensor& y,
                        const at::Tensor& mean, const at::Tensor& rstd) {
  module().layer_norm_forward(x, branch, weight, bias, eps, s, y, mean, rstd);
}

void layer_norm_backward(const at::Tensor& s, const at::Tensor& dy, const at::Tensor& ds,
                         const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& rstd,
                         const at::Tensor& dx, const at::Tensor& d_branch, const at::Tensor& dw,
                         const at::Tensor& db) {
  module().layer_norm_backward(s, dy, ds, weight, mean, rstd, dx, d_branch, dw, db);
}

at::Tensor column_sums(const at::Tensor& g, at::ScalarType type) {
  return module().column_sums(g, type);
}

std::pair<at::Tensor, at::Tensor> gelu_backward_sums(const at::Tensor& dh, const at::Tensor& pre,
                                                     at::ScalarType sum_type) {
  return module().gelu_backward_sums(dh, pre, sum_type);
}

bool gelu_gemm_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                       const at::Tensor& out, const at::Tensor& pre) {
  return module().gelu_gemm_forward(x, w, b, out, pre);
}

std::unique_ptr<DeviceClock> event_clock(const at::Device& device) {
  return module().event_clock(device);
}

c10::intrusive_ptr<compat::CommBackend> nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int world,
                                                   std::chrono::milliseconds timeout) {
  return module().nccl_group(store, rank, world, timeout);
}

}  // namespace wick::cuda
