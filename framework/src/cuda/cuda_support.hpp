// Private: what wick does differently on a CUDA device, behind one interface. With a CUDA
// LibTorch, the CUDA side is a module of its own (libwick_cuda.so: cuda_side.cpp and the
// kernels in *.cu, nvcc) that links LibTorch's CUDA libraries; libwick links LibTorch's CPU
// side alone and loads the module (cuda_support.cpp) only for a run that asks for CUDA. A CPU
// run then neither pays for loading the CUDA libraries (~0.3 s of every process start) nor
// touches CUDA state. With a CPU-only LibTorch there is no module and no CUDA device can be
// chosen (the trainer refuses one first).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cuda/cuda_load.hpp"
#include "loop/device_clock.hpp"
#include "wick/torch_compat.hpp"  // compat::CommBackend
#include "wick/version.hpp"       // WICK_PUBLIC_BEGIN

// Exported for the white-box tests (tests/), which link libwick; not an installed header.
WICK_PUBLIC_BEGIN

namespace c10d {
class Store;
}  // namespace c10d

namespace wick::cuda {

// Whether the current CUDA stream of `device` is capturing a CUDA graph (cuda_graph): work
// that needs the host (reading a value) must not run then.
bool capturing(const at::Device& device);

// Whether `device` (the current GPU without an index) multiplies bf16 natively: compute
// capability 8.0 or newer. False where the CUDA side is not loaded (a run on the CPU never
// loads it for this question), without a GPU, and for an index past the GPUs.
bool native_bf16(const at::Device& device);

// `host` in page-locked memory (a copy unless it is already), so that its copy to the GPU can
// run asynchronously. Called on the loader threads.
at::Tensor pinned(const at::Tensor& host);

// Copies each of the n `tensors` (a batch's) to `device`, in place, on a copy stream of their own,
// so that the copies overlap the work already queued on the current stream (the previous step); the
// current stream waits for them (one event, not the host) before the work queued after this call. A
// tensor on that GPU already (a device without an index: the current GPU) and an undefined one stay
// as they are.
void to_device_async(at::Tensor* tensors, std::size_t n, const at::Device& device);
// One tensor, the same way.
at::Tensor to_device_async(const at::Tensor& host, const at::Device& device);

// One Adam step of a contiguous float32 CUDA parameter p (updated in place with its moments m
// and v, from its gradient g): the formulas of fused_adam.cpp's CPU pass (decay > 0: L2 weight
// decay added to the gradient; shrink != 1: AdamW's decoupled decay, the parameter scaled
// first). Where copy is defined (contiguous bf16 of p's size on its GPU), the updated p
// rounded to bf16 is written there too (optim/bf16_copies.hpp).
struct AdamUpdate {
  at::Tensor p, g, m, v;
  float beta1, beta2, step_size, bc2_sqrt, eps, decay, shrink;
  at::Tensor copy;
};

// The updates on the current streams of their GPUs, in order, a few kernels for them all (one
// per 40 tensors) rather than one per parameter; a tensor listed twice is updated twice.
void adam_steps(const std::vector<AdamUpdate>& updates);

// wick::cross_entropy's kernels (cross_entropy_kernel.hpp) on the current stream, for
// contiguous float32 / bf16 / fp16 logits [rows, vocab] and int64 targets [rows] on one GPU.
// The rows' losses and log-sum-exps, in float:
std::pair<at::Tensor, at::Tensor> cross_entropy_rows(const at::Tensor& logits,
                                                     const at::Tensor& target,
                                                     std::int64_t ignore_index);
// and the gradient of sum(losses) x scale (a float scalar on the GPU) in the logits' type.
at::Tensor cross_entropy_grad(const at::Tensor& logits, const at::Tensor& target,
                              const at::Tensor& lse, const at::Tensor& scale,
                              std::int64_t ignore_index);

// wick::layer_norm's kernels (layer_norm_kernel.hpp) on the current stream, for contiguous
// rows [rows, width] on one GPU, float32 or bf16 (a branch comes with a float32 x), weight and
// bias float32 [width], mean and rstd float32 [rows]. Forward: s = x + branch (float32, when
// the branch is defined), y in its own type, and the rows' mean and rstd:
void layer_norm_forward(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                        const at::Tensor& bias, float eps, const at::Tensor& s, const at::Tensor& y,
                        const at::Tensor& mean, const at::Tensor& rstd);
// and backward: dx (in s's type; ds, when defined, added) and d_branch (when defined, in its
// own type), dw and db (float32 [width]).
void layer_norm_backward(const at::Tensor& s, const at::Tensor& dy, const at::Tensor& ds,
                         const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& rstd,
                         const at::Tensor& dx, const at::Tensor& d_branch, const at::Tensor& dw,
                         const at::Tensor& db);

// The biases' gradients (column_sum_kernel.hpp) on the current stream, for float32 or bf16
// rows [rows, width] on a GPU: the sums over the rows, in `type` (float32 or bf16):
at::Tensor column_sums(const at::Tensor& g, at::ScalarType type);
// and GELU's (tanh) gradient dh gelu'(pre) for bf16 dh and pre, with its column sums in
// sum_type, from one pass.
std::pair<at::Tensor, at::Tensor> gelu_backward_sums(const at::Tensor& dh, const at::Tensor& pre,
                                                     at::ScalarType sum_type);

// wick::gelu_mlp's first product with GELU in cuBLASLt's epilogue (gelu_gemm.hpp), for bf16
// matrices on one GPU: pre = x w^T + b and out = gelu_tanh(pre); false, with nothing written,
// where cuBLASLt cannot take them.
bool gelu_gemm_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                       const at::Tensor& out, const at::Tensor& pre);

// A DeviceClock of CUDA events on `device`'s current stream (the profiler's clock on a GPU).
// Marks made while the stream captures a CUDA graph are not recorded and time nothing.
std::unique_ptr<DeviceClock> event_clock(const at::Device& device);

// An NCCL process group over `store` (wick::nccl_group, once the CUDA side is loaded).
c10::intrusive_ptr<compat::CommBackend> nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int world,
                                                   std::chrono::milliseconds timeout);

}  // namespace wick::cuda

WICK_PUBLIC_END
