// The CUDA side of cuda_support.hpp (built with a CUDA LibTorch only).
#include "cuda/cuda_support.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <stdexcept>

#include "cuda/adam_kernel.hpp"

namespace wick::cuda {

bool compiled() {
  return true;
}

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

}  // namespace wick::cuda
