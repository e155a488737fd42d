// The helpers of ops/bf16_products.hpp.
#include "ops/bf16_products.hpp"

#include <ATen/ATen.h>
#include <torch/version.h>

#include "cuda/cuda_load.hpp"
#include "cuda/cuda_support.hpp"
#include "cuda/own_kernels.hpp"
#include "ops/autocast.hpp"
#include "ops/cpu_data.hpp"
#include "optim/bf16_copies.hpp"
#include "wick/hardware.hpp"
#include "wick/run.hpp"
#include "wick/torch_compat.hpp"

namespace wick {

bool takes_bf16_products(const at::Tensor& x, std::initializer_list<const at::Tensor*> params) {
  if (!x.defined() || !x.is_cuda() || x.dim() < 1 || x.numel() == 0) return false;
  bool all_bf16 = true;
  const auto takes = [&](const at::Tensor& t) {
    if (t.device() != x.device() || t.layout() != at::kStrided || !cpu_kernel_type(t.scalar_type()))
      return false;
    all_bf16 = all_bf16 && t.scalar_type() == at::kBFloat16;
    return true;
  };
  if (!takes(x)) return false;
  for (const auto* p : params)
    if (p->defined() && !takes(*p)) return false;
  // Another autocast type would cast bf16 tensors to it for the products.
  return bf16_autocast(at::kCUDA) || (all_bf16 && !compat::autocast_enabled(at::kCUDA));
}

at::Tensor param_as(const at::Tensor& p, at::ScalarType type) {
  if (type == at::kBFloat16 && !cuda::hidden(cuda::OwnKernel::bf16_copies))
    return bf16_copies::of(p);
  return p.to(type);
}

at::Tensor product_as(const at::Tensor& a, const at::Tensor& b, at::ScalarType type) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
  if (a.is_cuda() && type == at::kFloat && a.scalar_type() == at::kBFloat16 &&
      b.scalar_type() == at::kBFloat16) {
    // LibTorch refuses a bf16 product with a float result below compute capability 8.0 (where
    // bf16 is not native: a V100, a T4). native_bf16 says false for a GPU until wick's CUDA
    // side is loaded, which a program calling wick::linear without a Trainer has not: a CUDA
    // tensor here means LibTorch's CUDA is up, so load it (the GPU run of 2026-12-04 found
    // the product cast from bf16 there).
    if (cuda::load().empty() && native_bf16(Device{DeviceType::cuda, a.device().index()}))
      return at::mm(a, b, type);
  }
#endif
  return at::mm(a, b).to(type);
}

bool column_sums_take(const at::Tensor& g, at::ScalarType type) {
  const auto takes = [](at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; };
  return g.is_cuda() && g.dim() == 2 && takes(g.scalar_type()) && takes(type) &&
         !cuda::hidden(cuda::OwnKernel::bias_grad);
}

at::Tensor rows_sum_as(const at::Tensor& g, at::ScalarType type) {
  if (column_sums_take(g, type)) return cuda::column_sums(g, type);
  return at::sum(g, {0}, /*keepdim=*/false, type);
}

}  // namespace wick
