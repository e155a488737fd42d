#include "optim/optimizers.hpp"

#include "wick/params.hpp"

namespace wick {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerOptions& o,
                                                        std::vector<at::Tensor> params) {
  if (o.betas.size() != 2) throw ConfigError("optimizer.betas needs two values");
  auto betas = std::make_tuple(o.betas[0], o.betas[1]);
  if (o.name == "adam")
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr)
                                                            .betas(betas)
                                                            .eps(o.eps)
                                                            .weight_decay(o.weight_decay)
                                                            .amsgrad(o.amsgrad));
  if (o.name == "adamw")
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr)
                    .betas(betas)
                    .eps(o.eps)
                    .weight_decay(o.weight_decay_set ? o.weight_decay : 0.01)
                    .amsgrad(o.amsgrad));
  if (o.name == "sgd")
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                           .momentum(o.momentum)
                                                           .dampening(o.dampening)
                                                           .weight_decay(o.weight_decay)
                                                           .nesterov(o.nesterov));
  throw ConfigError("unknown optimizer '" + o.name + "'; use adam, adamw or sgd");
}

}  // namespace wick
