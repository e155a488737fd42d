// The model at a glance: its modules with their parameter counts, trainable or frozen, and
// sizes (`wick describe`, the start of `wick fit`). Torch types are only forward-declared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace torch {
namespace nn {
class Module;
}
}  // namespace torch

namespace wick {

class Config;
class PluginFinder;
struct HookEntry;

struct ModuleRow {
  std::string name;  // dotted path ("" for the model itself)
  std::string type;  // "Linear", "Conv2d", "Sequential" (LibTorch's class, without "Impl")
  int depth = 0;     // 0: the model
  std::int64_t params = 0, trainable = 0;  // its own and its children's
  std::int64_t bytes = 0;                  // parameters and buffers
};

// The model, then its modules down to max_depth, in registration order.
std::vector<ModuleRow> module_rows(const torch::nn::Module& model, int max_depth = 2);
// A Markdown table of module_rows (at most max_rows modules, then a line saying how many were
// left out) and the totals.
std::string model_summary(const torch::nn::Module& model, int max_depth = 2,
                          std::size_t max_rows = 40);
// Builds the config's task as `wick fit` would (seeded) and summarises its model, with the
// memory its training holds per rank at `ranks` ranks (wick/memory_estimate.hpp): in one
// process and as each data-parallel strategy among `hooks` shares it; with none, as each of
// wick's (ddp, zero3) would.
std::string task_model_summary(const Config& cfg, const PluginFinder& finder, int ranks,
                               const std::vector<HookEntry>& hooks);

}  // namespace wick

WICK_PUBLIC_END
