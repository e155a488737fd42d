// Private: builds the optimizer an OptimizerOptions describes.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "wick/trainer.hpp"

namespace wick {

// Throws ConfigError for an unknown name or options it cannot use.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& o,
                                                        std::vector<at::Tensor> params);

}  // namespace wick
