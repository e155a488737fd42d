#include "optim/hyperparameters.hpp"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <tuple>

namespace wick {

namespace {

template <class Options>
void adam_like(const Options& a, Hyperparameters& out) {
  out.emplace_back("weight_decay", a.weight_decay());
  out.emplace_back("beta1", std::get<0>(a.betas()));
  out.emplace_back("beta2", std::get<1>(a.betas()));
  out.emplace_back("eps", a.eps());
  out.emplace_back("amsgrad", a.amsgrad() ? 1.0 : 0.0);
}

}  // namespace

Hyperparameters hyperparameters(const torch::optim::OptimizerOptions& o) {
  Hyperparameters out{{"lr", o.get_lr()}};
  if (const auto* a = dynamic_cast<const torch::optim::AdamOptions*>(&o)) {
    adam_like(*a, out);
  } else if (const auto* w = dynamic_cast<const torch::optim::AdamWOptions*>(&o)) {
    adam_like(*w, out);
  } else if (const auto* s = dynamic_cast<const torch::optim::SGDOptions*>(&o)) {
    out.emplace_back("momentum", s->momentum());
    out.emplace_back("dampening", s->dampening());
    out.emplace_back("weight_decay", s->weight_decay());
    out.emplace_back("nesterov", s->nesterov() ? 1.0 : 0.0);
  }
  return out;
}

const char* optimizer_name(const torch::optim::OptimizerOptions& o) {
  if (dynamic_cast<const torch::optim::AdamOptions*>(&o)) return "adam";
  if (dynamic_cast<const torch::optim::AdamWOptions*>(&o)) return "adamw";
  if (dynamic_cast<const torch::optim::SGDOptions*>(&o)) return "sgd";
  return "";
}

}  // namespace wick
