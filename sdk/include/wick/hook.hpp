// The hook contract: a hook subscribes to lifecycle points and stage chains in connect(),
// may carry state into checkpoints, and may cancel work by throwing a Cancel.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wick/metrics.hpp"
#include "wick/points.hpp"
#include "wick/profile.hpp"
#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace at {
class Tensor;
}
namespace torch::nn {
class Module;
}

namespace wick {

class Context;
class StateDict;

// Tensors by name, as the model's named_parameters() and named_buffers() spell them.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Thrown by a hook to abandon the rest of a step, an epoch or the whole fit. The trainer
// fires after_cancel, then carries on after that scope (step, epoch) or ends the fit.
// Exported so that a catch in the host matches a throw in a plugin built with hidden visibility.
struct WICK_EXPORT Cancel : std::exception {};
struct WICK_EXPORT CancelStep : Cancel {
  const char* what() const noexcept override { return "step cancelled"; }
};
struct WICK_EXPORT CancelEpoch : Cancel {
  const char* what() const noexcept override { return "epoch cancelled"; }
};
struct WICK_EXPORT CancelFit : Cancel {
  const char* what() const noexcept override { return "fit cancelled"; }
};

// The rest of a stage chain. Call it to pass on; do not call it to stop the stage (for
// optimizer_step that means "the optimizer did not step"). Returns what the rest returned.
class Next {
 public:
  struct Chain;
  Next(const Chain* chain, std::size_t index, Context* ctx)
      : chain_(chain), index_(index), ctx_(ctx) {}
  bool operator()() const;

 private:
  const Chain* chain_;
  std::size_t index_;
  Context* ctx_;
};

// The capabilities the built-in plugins state in the optimizer_step stage (SDK 2.8), for
// Registrar::provides and needs. A plugin may also name one of its own as a string; wick
// checks every name once at start, and refuses one a letter or two from a built-in name as a
// misspelling (a need that no hook provides would otherwise hold silently).
enum class Capability : std::uint8_t {
  accumulated_gradients,  // the gradients of a whole accumulation window (grad_accum)
  unscaled_gradients,     // the loss scale divided out (mixed_precision)
  reduced_gradients,      // all-reduced over the ranks (ddp)
};
inline constexpr Capability kCapabilities[] = {Capability::accumulated_gradients,
                                               Capability::unscaled_gradients,
                                               Capability::reduced_gradients};
// Inline, so that describing a plugin needs nothing from libwick.
inline std::string_view to_string(Capability c) {
  switch (c) {
    case Capability::accumulated_gradients:
      return "accumulated_gradients";
    case Capability::unscaled_gradients:
      return "unscaled_gradients";
    case Capability::reduced_gradients:
      return "reduced_gradients";
  }
  return "?";
}

using PointFn = std::function<void(Context&)>;
using StageFn = std::function<bool(Context&, Next)>;

// What a hook subscribes to; filled in Hook::connect().
class Registrar {
 public:
  virtual ~Registrar() = default;
  // Call fn at point p, at this hook instance's order.
  virtual void on(Point p, PointFn fn) = 0;
  // Add a handler to stage s, at this hook instance's order (lower runs first, nearer the
  // caller; the default runs last).
  virtual void stage(Stage s, StageFn fn) = 0;
  // Ordering by capability: this instance's handler in stage s makes `capability` true for
  // the handlers after it ("accumulated_gradients", "unscaled_gradients",
  // "reduced_gradients"). A handler that needs it must come after every enabled provider;
  // checked once at start, with the orders to use. Without a provider the need holds.
  virtual void provides(Stage s, const std::string& capability) = 0;
  virtual void needs(Stage s, const std::string& capability, const std::string& why) = 0;
  // The same for a built-in capability (SDK 2.8): a misspelling does not compile.
  void provides(Stage s, Capability c) { provides(s, std::string(to_string(c))); }
  void needs(Stage s, Capability c, const std::string& why) {
    needs(s, std::string(to_string(c)), why);
  }
  // Receive every metrics record (per logged step and per epoch) after it is written to
  // metrics.jsonl: the one extension point for metrics sinks (CSV, progress displays).
  virtual void on_record(std::function<void(const Record&)> fn) = 0;
  // A sink that writes files also says how to rewind them: on resume, fn gets the records
  // the restored run had written (in order; read back from metrics.jsonl) and must leave its
  // output holding exactly those, so that nothing is logged twice.
  virtual void on_rewind(std::function<void(const std::vector<Record>&)> fn) = 0;
  // Since SDK 2.3: time the loop's phases and every hook and stage handler of this run, for
  // Context::profile() (the profiler plugin asks). Without it nothing is timed.
  virtual void request_profile() = 0;
  // Since SDK 2.19: the same, with the clock a CUDA run's steps and phases are timed by
  // (request_profile() asks for ProfileClock::device). One clock a run: the host's when any
  // hook asks for it.
  virtual void request_profile_on(ProfileClock clock) = 0;
};

class Hook {
 public:
  virtual ~Hook() = default;
  virtual void connect(Registrar& r) = 0;
  // Checkpoint state, keyed by instance name by the host. Only called when has_state().
  virtual bool has_state() const { return false; }
  virtual void save_state(StateDict& /*out*/) const {}
  virtual void load_state(const StateDict& /*in*/) {}
  // Since SDK 2.5: a hook that keeps other weights for evaluation than the ones trained (an
  // average such as EMA's) offers them here, for the run's model.pt and `wick export` /
  // `evaluate` / `predict` with --weights auto: it fills `out` with the tensors that differ
  // from the model's own (the model's, by name, for the rest) and returns a word for them
  // ("ema"); "" when it has none (yet). Called between steps, with its state as a checkpoint
  // restores it.
  virtual std::string eval_weights(const torch::nn::Module& /*model*/,
                                   NamedTensors& /*out*/) const {
    return "";
  }
};

}  // namespace wick

WICK_PUBLIC_END
