// The eleven lifecycle points the trainer fires and the three stages it delegates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// In the order a fit first reaches them.
enum class Point : std::uint8_t {
  before_fit,
  before_epoch,
  before_step,
  after_pred,
  after_loss,
  after_backward,
  after_step,
  before_valid,
  after_epoch,
  after_fit,
  after_cancel,
};
inline constexpr std::size_t kNumPoints = 11;

// Work the trainer never does itself: each stage is a chain of handlers ending in a default
// (the task's forward, loss.backward(), optimizer.step(), optimizer.zero_grad()). A handler
// wraps what comes after it: autocast or a memory format around the forward, loss scaling
// around backward, accumulation, unscaling, clipping and all-reduce before the step.
// gradients (SDK 2.5) wraps a training step's whole way to its gradients: the forward stage,
// after_pred, the task's loss, after_loss, the backward stage and after_backward (its default
// runs them; cuda_graph captures them once and replays them). Not run under manual
// optimization, where the task drives its own steps.
enum class Stage : std::uint8_t { forward, backward, optimizer_step, zero_grad, gradients };
inline constexpr std::size_t kNumStages = 5;

std::string_view to_string(Point p);
std::string_view to_string(Stage s);
std::optional<Point> point_from_string(std::string_view name);
std::optional<Stage> stage_from_string(std::string_view name);

}  // namespace wick

WICK_PUBLIC_END
