// Private: the one way the loop runs a cancellable scope (fastai's _with_events). A step or an
// epoch, in training or validation, runs its body here: a cancel of its own kind (CancelStep in
// a step, CancelEpoch in an epoch), thrown by a hook or by the body, ends it there and
// `cancelled` hears of it (the trainer counts it and fires after_cancel); any other exception
// goes on to the enclosing scope. The fit's scope ends the fit instead (trainer.cpp).
#pragma once

#include <type_traits>

#include "wick/context.hpp"  // CancelScope
#include "wick/hook.hpp"     // CancelStep, CancelEpoch

namespace wick {

// Runs body() as a scope of kind S; false when a cancel of that kind ended it.
template <CancelScope S, class Body, class Cancelled>
bool run_scope(Body&& body, Cancelled&& cancelled) {
  static_assert(S != CancelScope::fit, "a fit's scope ends the fit (Trainer::fit)");
  using Cancel = std::conditional_t<S == CancelScope::step, CancelStep, CancelEpoch>;
  try {
    body();
    return true;
  } catch (const Cancel&) {
    cancelled(S);
    return false;
  }
}

}  // namespace wick
