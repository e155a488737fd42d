// What differs between the LibTorch releases wick builds against (Debian's 1.13 and 2.x), in
// one place: wick's own code and its plugins call these instead of testing versions. Each
// entry says what changed. sdk/README.md lists them.
#pragma once

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <torch/version.h>

#include <cstddef>
#include <cstdint>
#include <string>

#if TORCH_VERSION_MAJOR < 2
#include <c10/util/string_utils.h>
#endif

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace wick::compat {

// The LibTorch these headers belong to, e.g. "2.11.0".
inline constexpr int kTorchMajor = TORCH_VERSION_MAJOR;
inline constexpr int kTorchMinor = TORCH_VERSION_MINOR;
inline constexpr int kTorchPatch = TORCH_VERSION_PATCH;

// 1. torch::optim keys its per-parameter state by the TensorImpl's address: as text in 1.13
//    (c10::guts::to_string, removed in 2.x), as the pointer itself (void*) in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using OptimStateKey = void*;
inline OptimStateKey optim_state_key(const at::Tensor& p) {
  return p.unsafeGetTensorImpl();
}
#else
using OptimStateKey = std::string;
inline OptimStateKey optim_state_key(const at::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
#endif

// 2. Autocast: 1.13 has one switch and dtype per device kind (set_cpu_enabled,
//    set_autocast_gpu_dtype, ...); 2.x takes the device type (set_autocast_enabled(type, on))
//    and deprecates the old names.
inline bool autocast_enabled(c10::DeviceType d) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR >= 3
  return at::autocast::is_autocast_enabled(d);
#else
  return d == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}
inline void set_autocast_enabled(c10::DeviceType d, bool on) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR >= 3
  at::autocast::set_autocast_enabled(d, on);
#else
  if (d == c10::DeviceType::CUDA)
    at::autocast::set_enabled(on);
  else
    at::autocast::set_cpu_enabled(on);
#endif
}
inline at::ScalarType autocast_dtype(c10::DeviceType d) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR >= 3
  return at::autocast::get_autocast_dtype(d);
#else
  return d == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                    : at::autocast::get_autocast_cpu_dtype();
#endif
}
inline void set_autocast_dtype(c10::DeviceType d, at::ScalarType t) {
#if TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR >= 3
  at::autocast::set_autocast_dtype(d, t);
#else
  if (d == c10::DeviceType::CUDA)
    at::autocast::set_autocast_gpu_dtype(t);
  else
    at::autocast::set_autocast_cpu_dtype(t);
#endif
}

// 3. c10d: in 1.13 a process group (ProcessGroupGloo, ProcessGroupNCCL) is a c10d::ProcessGroup;
//    in 2.x it is a c10d::Backend, which a ProcessGroup holds per device. wick talks to the
//    backend itself: the collectives it calls (allreduce, broadcast, send, recv, barrier) have
//    the same signatures on both.
#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

// 4. c10::MemoryReportingInfoBase::reportMemoryUsage (the allocators' report to a memory
//    profiler): the allocator's totals are int64_t in 1.13, size_t in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using AllocatorTotal = std::size_t;
#else
using AllocatorTotal = std::int64_t;
#endif

}  // namespace wick::compat

WICK_PUBLIC_END
