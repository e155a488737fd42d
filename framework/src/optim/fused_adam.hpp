// Private: Adam with each float32 parameter updated in one pass over its elements. See
// fused_adam.cpp.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace wick {

class FusedAdam : public torch::optim::Adam {
 public:
  FusedAdam(std::vector<torch::optim::OptimizerParamGroup> groups,
            torch::optim::AdamOptions defaults)
      : torch::optim::Adam(std::move(groups), std::move(defaults)) {}
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace wick
