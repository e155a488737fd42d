// The CUDA module (libwick_cuda.so, built with a CUDA LibTorch only): cuda_support.hpp's
// functions on the GPU, handed to libwick as one table (cuda_module.hpp).
#include "cuda/cuda_module.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <vector>

#include "cuda/adam_kernel.hpp"

namespace wick::cuda {
namespace {

bool capturing(const at::Device& device) {
  if (!device.is_cuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const auto stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

at::Tensor pinned(const at::Tensor& host) {
  if (!host.defined() || !host.device().is_cpu() || host.is_pinned()) return host;
  return host.pin_memory();
}

at::Tensor to_device_async(const at::Tensor& host, const at::Device& device) {
  if (!host.defined()) return host;
  const c10::cuda::CUDAGuard guard(device);
  const auto compute = c10::cuda::getCurrentCUDAStream();
  const auto copy = c10::cuda::getStreamFromPool();
  at::Tensor out;
  {
    const c10::cuda::CUDAStreamGuard on_copy(copy);
    out = host.to(device, /*non_blocking=*/true);
  }
  at::cuda::CUDAEvent copied;
  copied.record(copy);
  copied.block(compute);
  // Allocated on the copy stream, used on the compute stream: its memory must not be reused
  // before the compute stream is done with it.
  out.record_stream(compute);
  return out;
}

void adam_step(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, float beta1,
               float beta2, float step_size, float bc2_sqrt, float eps, float decay) {
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&p, &g, &m, &v})
    if (!t->is_cuda() || t->scalar_type() != at::kFloat || !t->is_contiguous() ||
        t->device() != p.device() || t->numel() != p.numel())
      throw std::logic_error(
          "cuda::adam_step: every tensor must be a contiguous float32 tensor "
          "of the parameter's size on its GPU");
  const c10::cuda::CUDAGuard guard(p.device());
  launch_adam(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(),
              p.numel(), beta1, beta2, step_size, bc2_sqrt, eps, decay,
              c10::cuda::getCurrentCUDAStream().stream());
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

const Module kModule{capturing, pinned, to_device_async, adam_step, event_clock, nccl_group};

}  // namespace
}  // namespace wick::cuda

extern "C" __attribute__((visibility("default"))) const wick::cuda::Module* wick_cuda_module() {
  return &wick::cuda::kModule;
}
