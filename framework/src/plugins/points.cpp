#include <array>

#include "wick/context.hpp"
#include "wick/params.hpp"
#include "wick/points.hpp"

namespace wick {

namespace {
constexpr std::array<std::string_view, kNumPoints> kPointNames = {
    "before_fit", "before_epoch", "before_step", "after_pred", "after_loss",  "after_backward",
    "after_step", "before_valid", "after_epoch", "after_fit",  "after_cancel"};
constexpr std::array<std::string_view, kNumStages> kStageNames = {
    "forward", "backward", "optimizer_step", "zero_grad", "gradients"};
}  // namespace

std::string_view to_string(Point p) {
  return kPointNames[static_cast<std::size_t>(p)];
}
std::string_view to_string(Stage s) {
  return kStageNames[static_cast<std::size_t>(s)];
}

std::optional<Point> point_from_string(std::string_view name) {
  for (std::size_t i = 0; i < kNumPoints; ++i)
    if (kPointNames[i] == name) return static_cast<Point>(i);
  return std::nullopt;
}
std::optional<Stage> stage_from_string(std::string_view name) {
  for (std::size_t i = 0; i < kNumStages; ++i)
    if (kStageNames[i] == name) return static_cast<Stage>(i);
  return std::nullopt;
}

std::string_view to_string(CancelScope s) {
  switch (s) {
    case CancelScope::step:
      return "step";
    case CancelScope::epoch:
      return "epoch";
    case CancelScope::fit:
      return "fit";
  }
  return "?";
}

std::string_view to_string(CancelReason r) {
  switch (r) {
    case CancelReason::cancel_step:
      return "CancelStep";
    case CancelReason::cancel_epoch:
      return "CancelEpoch";
    case CancelReason::cancel_fit:
      return "CancelFit";
    case CancelReason::interrupt:
      return "interrupt";
    case CancelReason::failure:
      return "failure";
  }
  return "?";
}

std::string_view to_string(ParamType t) {
  switch (t) {
    case ParamType::boolean:
      return "bool";
    case ParamType::integer:
      return "int";
    case ParamType::floating:
      return "float";
    case ParamType::floating_inf:
      return "float or inf";
    case ParamType::string:
      return "string";
    case ParamType::int_list:
      return "int list";
    case ParamType::float_list:
      return "float list";
    case ParamType::string_list:
      return "string list";
    case ParamType::choice:
      return "choice";
  }
  return "?";
}

}  // namespace wick
