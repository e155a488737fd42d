// Since SDK 2.18: autocast for a scope, on LibTorch 1.13 and 2.x alike. The mixed_precision
// hook runs the forward stage in one; a program of its own (an inference loop, a sampler) can
// run its forwards the same way.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "wick/torch_compat.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// Autocast to `dtype` on device kind `device` while it lives; the switch and dtype it found are
// restored after. While the outermost scope lives, LibTorch keeps each weight's cast (a leaf
// that requires grad) and reuses it: one cast per weight for a whole forward, or for every
// token of a sampler; the casts are dropped when it ends, since a step makes them stale.
// LibTorch 1.13's CPU autocast takes bf16 only: another dtype throws c10::Error there, before
// anything is changed.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, at::ScalarType dtype)
      : device_(device),
        prev_on_(compat::autocast_enabled(device)),
        prev_dtype_(compat::autocast_dtype(device)) {
    compat::set_autocast_dtype(device, dtype);
    compat::set_autocast_enabled(device, true);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    compat::set_autocast_enabled(device_, prev_on_);
    compat::set_autocast_dtype(device_, prev_dtype_);
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool prev_on_;
  at::ScalarType prev_dtype_;
};

}  // namespace wick

WICK_PUBLIC_END
