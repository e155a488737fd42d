// Private: builds the run's optimizers: one over the whole model, or one per named top-level
// module of it ([optimizers.NAME]); inside each, parameter groups chosen by globs.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wick/options.hpp"

namespace wick {

struct NamedOptimizer {
  std::string name;  // "optimizer" for the single one; else the module's name
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  // Each parameter group's options as the config gave them, before a schedule or a resume
  // changed them: what a schedule scales, and what a checkpoint records of the config.
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> configured;
};

// Throws ConfigError, placed at the optimizer's or group's table, for a module the model does
// not have (with a suggestion), a module with trainable parameters but no optimizer, a group
// glob that matches nothing, or a parameter two groups claim.
std::vector<NamedOptimizer> make_optimizers(const std::vector<OptimizerOptions>& specs,
                                            torch::nn::Module& model);

// Throws ConfigError placed at `where` (the optimizer's table) when no parameter of the model
// requires grad: said before a fit trains (and by `wick check`), not by autograd at the first
// backward. Evaluation needs none.
void check_trainable(const torch::nn::Module& model, const std::string& where);

// The index of the optimizer named `name`; throws std::invalid_argument naming the run's ones.
std::size_t optimizer_index(const std::vector<NamedOptimizer>& optimizers, std::string_view name);

}  // namespace wick
