// cuda_support.hpp for a CPU-only LibTorch: no CUDA device can be chosen (the trainer refuses
// one), so the copies stay plain and the kernels are never asked for.
#include <stdexcept>

#include "cuda/cuda_support.hpp"

namespace wick::cuda {

bool compiled() {
  return false;
}

bool capturing(const at::Device&) {
  return false;
}

at::Tensor pinned(const at::Tensor& host) {
  return host;
}

at::Tensor to_device_async(const at::Tensor& host, const at::Device& device) {
  return host.defined() ? host.to(device, /*non_blocking=*/true) : host;
}

void adam_step(at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&, float, float, float, float,
               float, float) {
  throw std::logic_error("cuda::adam_step: this wick was built without CUDA");
}

std::unique_ptr<DeviceClock> event_clock(const at::Device&) {
  throw std::logic_error("cuda::event_clock: this wick was built without CUDA");
}

}  // namespace wick::cuda
