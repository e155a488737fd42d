// The CUDA module (libwick_cuda.so, built with a CUDA LibTorch only): cuda_support.hpp's
// functions on the GPU, handed to libwick as one table (cuda_module.hpp).
#include "cuda/cuda_module.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cuda/adam_kernel.hpp"
#include "cuda/column_sum_kernel.hpp"
#include "cuda/cross_entropy_kernel.hpp"
#include "cuda/gelu_gemm.hpp"
#include "cuda/layer_norm_kernel.hpp"

namespace wick::cuda {
namespace {

bool capturing(const at::Device& device) {
  if (!device.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const auto stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

// Compute capability 8.0 (Ampere) and newer multiply bf16 in tensor cores; asked of the
// device itself, as LibTorch's cuDNN hook says false without cuDNN.
bool native_bf16(const at::Device& device) {
  // The count first: it is 0 without a driver, where asking for the current device throws.
  const auto gpus = at::cuda::device_count();
  if (!device.is_cuda() || gpus == 0) return false;
  const auto index = device.has_index() ? device.index() : at::cuda::current_device();
  return index >= 0 && index < gpus && at::cuda::getDeviceProperties(index)->major >= 8;
}

at::Tensor pinned(const at::Tensor& host) {
  if (!host.defined() || !host.device().is_cpu() || host.is_pinned()) return host;
  return host.pin_memory();
}

// The event the compute stream waits on for a batch's copies, one per GPU, kept from batch to
// batch: one record and one wait a batch, not an event made, recorded, waited on and
// destroyed per tensor. Destroyed when the thread ends: the main thread's at exit(), before
// the CUDA runtime's own teardown.
at::cuda::CUDAEvent& copies_done(c10::DeviceIndex gpu) {
  thread_local std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events;
  const auto i = static_cast<std::size_t>(gpu);
  if (events.size() <= i) events.resize(i + 1);
  if (!events[i]) events[i] = std::make_unique<at::cuda::CUDAEvent>();
  return *events[i];
}

void to_device_async(at::Tensor* tensors, std::size_t n, const at::Device& device) {
  const c10::cuda::CUDAGuard guard(device);
  // A device without an index ("cuda", as the trainer holds it) is the current GPU, which no
  // tensor's device equals as such.
  const at::Device gpu(at::kCUDA, c10::cuda::current_device());
  const auto compute = c10::cuda::getCurrentCUDAStream();
  std::optional<c10::cuda::CUDAStream> copy;
  for (std::size_t i = 0; i < n; ++i) {
    at::Tensor& t = tensors[i];
    // Undefined (predict's targets) stays so; gathered there already (trainer.data_on_device)
    // is taken as it is.
    if (!t.defined() || t.device() == gpu) continue;
    if (!copy) copy = c10::cuda::getStreamFromPool();
    {
      const c10::cuda::CUDAStreamGuard on_copy(*copy);
      t = t.to(gpu, /*non_blocking=*/true);
    }
    // Allocated on the copy stream, used on the compute stream: its memory must not be reused
    // before the compute stream is done with it.
    t.record_stream(compute);
  }
  if (!copy) return;
  auto& copied = copies_done(gpu.index());
  copied.record(*copy);
  copied.block(compute);
}

void adam_steps(const std::vector<AdamUpdate>& updates) {
  // Batched per GPU, in the order given (a model on one GPU: one batch).
  std::vector<AdamTensor> batch;
  batch.reserve(updates.size());
  for (std::size_t first = 0; first < updates.size();) {
    const auto device = updates[first].p.device();
    std::size_t end = first;
    batch.clear();
    for (; end < updates.size() && updates[end].p.device() == device; ++end) {
      const AdamUpdate& u = updates[end];
      for (const at::Tensor* t : {&u.p, &u.g, &u.m, &u.v})
        if (!t->is_cuda() || t->scalar_type() != at::kFloat || !t->is_contiguous() ||
            t->device() != device || t->numel() != u.p.numel())
          throw std::logic_error(
              "cuda::adam_steps: every tensor must be a contiguous float32 tensor "
              "of the parameter's size on its GPU");
      const auto& c = u.copy;
      if (c.defined() && (!c.is_cuda() || c.scalar_type() != at::kBFloat16 || !c.is_contiguous() ||
                          c.device() != device || c.numel() != u.p.numel()))
        throw std::logic_error(
            "cuda::adam_steps: a copy must be a contiguous bf16 tensor of the parameter's size "
            "on its GPU");
      batch.push_back({u.p.data_ptr<float>(), u.g.data_ptr<float>(), u.m.data_ptr<float>(),
                       u.v.data_ptr<float>(), u.p.numel(), u.beta1, u.beta2, u.step_size,
                       u.bc2_sqrt, u.eps, u.decay, u.shrink,
                       c.defined() ? static_cast<std::uint16_t*>(c.data_ptr()) : nullptr});
    }
    const c10::cuda::CUDAGuard guard(device);
    launch_adam(batch.data(), batch.size(), c10::cuda::getCurrentCUDAStream().stream());
    first = end;
  }
}

LogitType logit_type(const at::Tensor& logits) {
  switch (logits.scalar_type()) {
    case at::kFloat:
      return LogitType::f32;
    case at::kBFloat16:
      return LogitType::bf16;
    case at::kHalf:
      return LogitType::f16;
    default:
      throw std::logic_error("cuda::cross_entropy: logits must be float32, bf16 or fp16");
  }
}

void check_cross_entropy(const at::Tensor& logits, const at::Tensor& target) {
  if (!logits.is_cuda() || logits.dim() != 2 || !logits.is_contiguous() ||
      target.device() != logits.device() || target.scalar_type() != at::kLong ||
      !target.is_contiguous() || target.dim() != 1 || target.size(0) != logits.size(0))
    throw std::logic_error(
        "cuda::cross_entropy: contiguous logits [rows, vocab] and int64 targets [rows] on one "
        "GPU");
}

std::pair<at::Tensor, at::Tensor> cross_entropy_rows(const at::Tensor& logits,
                                                     const at::Tensor& target,
                                                     std::int64_t ignore_index) {
  check_cross_entropy(logits, target);
  const c10::cuda::CUDAGuard guard(logits.device());
  const auto rows = logits.size(0);
  auto loss = at::empty({rows}, logits.options().dtype(at::kFloat));
  auto lse = at::empty({rows}, logits.options().dtype(at::kFloat));
  launch_cross_entropy_forward(logits.data_ptr(), logit_type(logits), target.data_ptr<int64_t>(),
                               rows, logits.size(1), ignore_index, loss.data_ptr<float>(),
                               lse.data_ptr<float>(), c10::cuda::getCurrentCUDAStream().stream());
  return {loss, lse};
}

at::Tensor cross_entropy_grad(const at::Tensor& logits, const at::Tensor& target,
                              const at::Tensor& lse, const at::Tensor& scale,
                              std::int64_t ignore_index) {
  check_cross_entropy(logits, target);
  if (scale.scalar_type() != at::kFloat || scale.numel() != 1 ||
      scale.device() != logits.device() || lse.scalar_type() != at::kFloat ||
      !lse.is_contiguous() || lse.numel() != logits.size(0))
    throw std::logic_error("cuda::cross_entropy_grad: float lse [rows] and scale [1] on the GPU");
  const c10::cuda::CUDAGuard guard(logits.device());
  auto grad = at::empty_like(logits, at::MemoryFormat::Contiguous);
  const auto k = scale.contiguous();
  launch_cross_entropy_backward(logits.data_ptr(), grad.data_ptr(), logit_type(logits),
                                target.data_ptr<int64_t>(), lse.data_ptr<float>(),
                                k.data_ptr<float>(), logits.size(0), logits.size(1), ignore_index,
                                c10::cuda::getCurrentCUDAStream().stream());
  return grad;
}

// The layer norm kernels' row type of t (checked: float32 or bf16; undefined: f32, unused).
RowType row_type(const at::Tensor& t) {
  return t.defined() && t.scalar_type() == at::kBFloat16 ? RowType::bf16 : RowType::f32;
}

// Rows (where defined) float32 or bf16 [rows, width] as x is, columns float32 [width], per
// row float32 [rows]: every one contiguous on x's GPU.
void check_layer_norm(const at::Tensor& x, std::initializer_list<const at::Tensor*> rows,
                      std::initializer_list<const at::Tensor*> columns,
                      std::initializer_list<const at::Tensor*> per_row) {
  const auto on = [&](const at::Tensor& t, std::int64_t numel) {
    return t.device() == x.device() && t.is_contiguous() && t.numel() == numel;
  };
  const auto floats = [&](const at::Tensor& t, std::int64_t numel) {
    return t.defined() && t.scalar_type() == at::kFloat && on(t, numel);
  };
  bool ok = x.is_cuda() && x.dim() == 2;
  for (const auto* t : rows)
    ok = ok && (!t->defined() || (on(*t, x.numel()) && (t->scalar_type() == at::kFloat ||
                                                        t->scalar_type() == at::kBFloat16)));
  for (const auto* t : columns) ok = ok && floats(*t, x.size(1));
  for (const auto* t : per_row) ok = ok && floats(*t, x.size(0));
  if (!ok)
    throw std::logic_error(
        "cuda::layer_norm: contiguous float32 or bf16 rows [rows, width], float32 weight and "
        "bias [width], mean and rstd [rows], on one GPU");
}

void layer_norm_forward(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                        const at::Tensor& bias, float eps, const at::Tensor& s, const at::Tensor& y,
                        const at::Tensor& mean, const at::Tensor& rstd) {
  check_layer_norm(x, {&x, &branch, &s, &y}, {&weight, &bias}, {&mean, &rstd});
  if (branch.defined() && (x.scalar_type() != at::kFloat || s.scalar_type() != at::kFloat))
    throw std::logic_error("cuda::layer_norm_forward: a branch comes with float32 x and s");
  const c10::cuda::CUDAGuard guard(x.device());
  launch_layer_norm_forward(
      x.data_ptr(), row_type(x), branch.defined() ? branch.data_ptr() : nullptr, row_type(branch),
      branch.defined() ? s.data_ptr<float>() : nullptr, y.data_ptr(), row_type(y),
      weight.data_ptr<float>(), bias.data_ptr<float>(), eps, x.size(0), x.size(1),
      mean.data_ptr<float>(), rstd.data_ptr<float>(), c10::cuda::getCurrentCUDAStream().stream());
}

void layer_norm_backward(const at::Tensor& s, const at::Tensor& dy, const at::Tensor& ds,
                         const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& rstd,
                         const at::Tensor& dx, const at::Tensor& d_branch, const at::Tensor& dw,
                         const at::Tensor& db) {
  check_layer_norm(s, {&s, &dy, &ds, &dx, &d_branch}, {&weight, &dw, &db}, {&mean, &rstd});
  const auto rows = s.size(0), width = s.size(1);
  if ((ds.defined() && ds.scalar_type() != s.scalar_type()) || dx.scalar_type() != s.scalar_type())
    throw std::logic_error("cuda::layer_norm_backward: ds and dx in s's type");
  const c10::cuda::CUDAGuard guard(s.device());
  auto partial = at::empty({layer_norm_partials(rows, width)}, weight.options());
  launch_layer_norm_backward(s.data_ptr(), row_type(s), dy.data_ptr(), row_type(dy),
                             ds.defined() ? ds.data_ptr() : nullptr, weight.data_ptr<float>(),
                             mean.data_ptr<float>(), rstd.data_ptr<float>(), rows, width,
                             dx.data_ptr(), d_branch.defined() ? d_branch.data_ptr() : nullptr,
                             row_type(d_branch), dw.data_ptr<float>(), db.data_ptr<float>(),
                             partial.data_ptr<float>(), c10::cuda::getCurrentCUDAStream().stream());
}

// Rows float32 or bf16 [rows, width] on a GPU, their sums float32 or bf16.
void check_column_sums(const at::Tensor& g, at::ScalarType type) {
  const auto takes = [](at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; };
  if (!g.is_cuda() || g.dim() != 2 || !takes(g.scalar_type()) || !takes(type))
    throw std::logic_error(
        "cuda::column_sums: float32 or bf16 rows [rows, width] on a GPU, summed into float32 "
        "or bf16");
}

at::Tensor column_sums(const at::Tensor& g, at::ScalarType type) {
  check_column_sums(g, type);
  const c10::cuda::CUDAGuard guard(g.device());
  const auto rows = g.contiguous();
  auto out = at::empty({g.size(1)}, g.options().dtype(type));
  auto partial =
      at::empty({column_sum_partials(g.size(0), g.size(1))}, g.options().dtype(at::kFloat));
  launch_column_sums(rows.data_ptr(), row_type(rows), g.size(0), g.size(1), out.data_ptr(),
                     row_type(out), partial.data_ptr<float>(),
                     c10::cuda::getCurrentCUDAStream().stream());
  return out;
}

std::pair<at::Tensor, at::Tensor> gelu_backward_sums(const at::Tensor& dh, const at::Tensor& pre,
                                                     at::ScalarType sum_type) {
  check_column_sums(dh, sum_type);
  if (dh.scalar_type() != at::kBFloat16 || pre.scalar_type() != at::kBFloat16 ||
      pre.sizes() != dh.sizes() || pre.device() != dh.device())
    throw std::logic_error("cuda::gelu_backward_sums: bf16 dh and pre of one shape on one GPU");
  const c10::cuda::CUDAGuard guard(dh.device());
  const auto h = dh.contiguous(), p = pre.contiguous();
  auto d = at::empty_like(h, at::MemoryFormat::Contiguous);
  auto sums = at::empty({dh.size(1)}, dh.options().dtype(sum_type));
  auto partial =
      at::empty({column_sum_partials(dh.size(0), dh.size(1))}, dh.options().dtype(at::kFloat));
  launch_gelu_backward_sums(h.data_ptr(), p.data_ptr(), dh.size(0), dh.size(1), d.data_ptr(),
                            sums.data_ptr(), row_type(sums), partial.data_ptr<float>(),
                            c10::cuda::getCurrentCUDAStream().stream());
  return {d, sums};
}

class EventClock final : public DeviceClock {
 public:
  explicit EventClock(const at::Device& device) : device_(device) {}
  std::size_t mark() override {
    if (capturing(device_)) return kNotRecorded;
    if (used_ == events_.size())
      events_.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));  // timed
    events_[used_]->record(c10::cuda::getCurrentCUDAStream(device_.index()));
    return used_++;
  }
  double seconds(std::size_t from, std::size_t to) override {
    if (from == kNotRecorded || to == kNotRecorded) return 0;
    events_[to]->synchronize();
    return static_cast<double>(events_[from]->elapsed_time(*events_[to])) / 1000.0;
  }
  void clear() override { used_ = 0; }

 private:
  static constexpr std::size_t kNotRecorded = static_cast<std::size_t>(-1);
  at::Device device_;
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> events_;  // reused after clear()
  std::size_t used_ = 0;
};

std::unique_ptr<DeviceClock> event_clock(const at::Device& device) {
  return std::make_unique<EventClock>(device);
}

c10::intrusive_ptr<compat::CommBackend> nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int world,
                                                   std::chrono::milliseconds timeout) {
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, o);
}

const Module kModule{
    sizeof(Module),      kModuleVersion, capturing,          native_bf16,        pinned,
    to_device_async,     adam_steps,     cross_entropy_rows, cross_entropy_grad, layer_norm_forward,
    layer_norm_backward, column_sums,    gelu_backward_sums, lt_gelu_forward,    event_clock,
    nccl_group};

}  // namespace
}  // namespace wick::cuda

extern "C" __attribute__((visibility("default"))) const wick::cuda::Module* wick_cuda_module() {
  return &wick::cuda::kModule;
}
