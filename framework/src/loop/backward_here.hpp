// Private: the step's backward pass runs on the thread that asks for it. On a GPU, LibTorch's
// autograd engine otherwise hands the pass to its own thread for the device and the caller
// waits for it to finish: two thread wake-ups a backward, on steps the host bounds (a small
// model's, whose GPU idles most of the step). The pass itself is the same: each node runs on
// its forward's stream either way. On the CPU nothing changes: its passes run on the caller.
// LibTorch 1.13 has no such switch (its CPU-only Debian build has no device thread to avoid).
#pragma once

#include <c10/core/AutogradState.h>
#include <torch/version.h>

namespace wick {

class BackwardHere {
 public:
#if TORCH_VERSION_MAJOR >= 2
  BackwardHere() : was_(c10::AutogradState::get_tls_state().get_multithreading_enabled()) {
    c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
  }
  ~BackwardHere() {
    c10::AutogradState::get_tls_state().set_multithreading_enabled(was_);
  }
#else
  // Nothing to switch. User-provided, so that a guard is no "unused variable" to the compiler.
  BackwardHere() {}
  ~BackwardHere() {}
#endif
  BackwardHere(const BackwardHere&) = delete;
  BackwardHere& operator=(const BackwardHere&) = delete;

#if TORCH_VERSION_MAJOR >= 2
 private:
  bool was_;
#endif
};

}  // namespace wick
