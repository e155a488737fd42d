// Private: an optimizer group's hyperparameters as named numbers. A checkpoint records the
// ones the config gave each group, and a resume compares them with its own config's, so that
// a setting changed for the resume (a lower lr) is taken rather than silently replaced by
// the checkpoint's.
#pragma once

#include <torch/optim/optimizer.h>

#include <string>
#include <utility>
#include <vector>

namespace wick {

using Hyperparameters = std::vector<std::pair<std::string, double>>;

// lr, then the options of Adam / AdamW (weight_decay, beta1, beta2, eps, amsgrad) or SGD
// (momentum, dampening, weight_decay, nesterov); booleans as 0 or 1. Other options: lr only.
Hyperparameters hyperparameters(const torch::optim::OptimizerOptions& o);

// The config's name of the optimizer these options belong to ("adam", "adamw", "sgd"; "" for
// another): a resume with another kind cannot take the checkpoint's optimizer state.
const char* optimizer_name(const torch::optim::OptimizerOptions& o);

}  // namespace wick
