// Private: Adam and AdamW with each float32 parameter updated in one pass over its elements.
// See fused_adam.cpp.
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

// AdamW (name = "adamw", fused = true): the same pass, after the decoupled weight decay's
// scaling of the parameter; torch::optim::AdamW's state.
class FusedAdamW : public torch::optim::AdamW {
 public:
  FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
             torch::optim::AdamWOptions defaults)
      : torch::optim::AdamW(std::move(groups), std::move(defaults)) {}
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace wick
