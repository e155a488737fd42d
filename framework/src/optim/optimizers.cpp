#include "optim/optimizers.hpp"

#include "optim/fused_adam.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <stdexcept>

#include "wick/config.hpp"
#include "wick/params.hpp"

namespace wick {

namespace {

ConfigError placed(const std::string& where, const std::string& msg) {
  return ConfigError(where.empty() ? msg : where + ": " + msg);
}

std::string table_of(const OptimizerOptions& o) {
  return o.module.empty() ? "[optimizer]" : "[optimizers." + o.module + "]";
}

std::unique_ptr<torch::optim::OptimizerOptions> base_options(const OptimizerOptions& o) {
  if (o.betas.size() != 2)
    throw placed(o.where, "'betas' in " + table_of(o) + " needs two values, e.g. [0.9, 0.999]");
  const auto betas = std::make_tuple(o.betas[0], o.betas[1]);
  switch (o.kind) {
    case OptimizerKind::adam:
      return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(o.lr)
                                                             .betas(betas)
                                                             .eps(o.eps)
                                                             .weight_decay(o.weight_decay)
                                                             .amsgrad(o.amsgrad));
    case OptimizerKind::adamw:
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(o.lr)
              .betas(betas)
              .eps(o.eps)
              .weight_decay(o.weight_decay_set ? o.weight_decay : 0.01)
              .amsgrad(o.amsgrad));
    case OptimizerKind::sgd:
      return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(o.lr)
                                                            .momentum(o.momentum)
                                                            .dampening(o.dampening)
                                                            .weight_decay(o.weight_decay)
                                                            .nesterov(o.nesterov));
  }
  throw std::logic_error("an OptimizerKind value that names no optimizer");
}

// A group's options: the optimizer's, with the group's own lr and weight decay.
std::unique_ptr<torch::optim::OptimizerOptions> group_options(
    const torch::optim::OptimizerOptions& base, const ParamGroupOptions& g) {
  auto o = base.clone();
  if (g.lr) o->set_lr(*g.lr);
  if (g.weight_decay) {
    if (auto* a = dynamic_cast<torch::optim::AdamOptions*>(o.get()))
      a->weight_decay(*g.weight_decay);
    if (auto* a = dynamic_cast<torch::optim::AdamWOptions*>(o.get()))
      a->weight_decay(*g.weight_decay);
    if (auto* a = dynamic_cast<torch::optim::SGDOptions*>(o.get()))
      a->weight_decay(*g.weight_decay);
  }
  return o;
}

std::unique_ptr<torch::optim::Optimizer> build(
    const OptimizerOptions& o, std::vector<torch::optim::OptimizerParamGroup> groups,
    const torch::optim::OptimizerOptions& defaults) {
  switch (o.kind) {
    case OptimizerKind::adam: {
      const auto& d = static_cast<const torch::optim::AdamOptions&>(defaults);
      if (o.fused) return std::make_unique<FusedAdam>(std::move(groups), d);
      return std::make_unique<torch::optim::Adam>(std::move(groups), d);
    }
    case OptimizerKind::adamw: {
      const auto& d = static_cast<const torch::optim::AdamWOptions&>(defaults);
      if (o.fused) return std::make_unique<FusedAdamW>(std::move(groups), d);
      return std::make_unique<torch::optim::AdamW>(std::move(groups), d);
    }
    case OptimizerKind::sgd:
      break;
  }
  return std::make_unique<torch::optim::SGD>(
      std::move(groups), static_cast<const torch::optim::SGDOptions&>(defaults));
}

using Named = std::vector<std::pair<std::string, at::Tensor>>;

std::unique_ptr<torch::optim::Optimizer> make_one(const OptimizerOptions& o, const Named& params) {
  auto defaults = base_options(o);
  std::vector<std::string> claimed_by(params.size());  // where of the group that took it
  std::vector<std::vector<at::Tensor>> chosen;
  for (const auto& g : o.groups) {
    std::vector<at::Tensor> mine;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (fnmatch(g.params.c_str(), params[i].first.c_str(), 0) != 0) continue;
      if (!claimed_by[i].empty())
        throw placed(g.where, "parameter '" + params[i].first +
                                  "' matches this group's params = \"" + g.params +
                                  "\" and the group at " + claimed_by[i] +
                                  "; a parameter belongs to one group: make the globs disjoint");
      claimed_by[i] = g.where.empty() ? "(an earlier group)" : g.where;
      mine.push_back(params[i].second);
    }
    if (mine.empty()) {
      std::string names;
      for (std::size_t i = 0; i < params.size() && i < 8; ++i)
        names += (i ? ", " : "") + params[i].first;
      if (params.size() > 8) names += ", ...";
      throw placed(g.where, "params = \"" + g.params + "\" matches no parameter of " +
                                (o.module.empty() ? "the model" : "module '" + o.module + "'") +
                                " (its parameters: " + names + ")");
    }
    chosen.push_back(std::move(mine));
  }
  // The parameters no group claims keep the optimizer's own options, in the first group.
  std::vector<at::Tensor> rest;
  for (std::size_t i = 0; i < params.size(); ++i)
    if (claimed_by[i].empty()) rest.push_back(params[i].second);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!rest.empty() || chosen.empty()) groups.emplace_back(std::move(rest));
  for (std::size_t k = 0; k < chosen.size(); ++k)
    groups.emplace_back(std::move(chosen[k]), group_options(*defaults, o.groups[k]));
  return build(o, std::move(groups), *defaults);
}

std::vector<NamedOptimizer> with_configured(std::vector<NamedOptimizer> out) {
  for (auto& o : out)
    for (const auto& g : o.optimizer->param_groups()) o.configured.push_back(g.options().clone());
  return out;
}

}  // namespace

std::vector<NamedOptimizer> make_optimizers(const std::vector<OptimizerOptions>& specs,
                                            torch::nn::Module& model) {
  std::vector<NamedOptimizer> out;
  if (specs.empty()) throw std::invalid_argument("make_optimizers: no optimizer");
  if (specs.size() == 1 && specs[0].module.empty()) {
    Named all;
    for (const auto& kv : model.named_parameters()) all.emplace_back(kv.key(), kv.value());
    out.push_back({"optimizer", make_one(specs[0], all), {}});
    return with_configured(std::move(out));
  }
  std::vector<std::string> modules;
  for (const auto& kv : model.named_children()) modules.push_back(kv.key());
  auto list = [&] {
    std::string s;
    for (const auto& m : modules) s += (s.empty() ? "" : ", ") + m;
    return s.empty() ? std::string("(none)") : s;
  };
  for (const auto& o : specs) {
    if (o.module.empty())
      throw placed(o.where,
                   "an optimizer without a module among several; name each "
                   "[optimizers.NAME] after a module of the model");
    auto it = std::find(modules.begin(), modules.end(), o.module);
    if (it == modules.end()) {
      std::string msg = "[optimizers." + o.module +
                        "] names no module of the task's model (its "
                        "modules: " +
                        list() + ")";
      if (auto s = did_you_mean(o.module, modules); !s.empty())
        msg += "; did you mean '" + s + "'?";
      throw placed(o.where, msg);
    }
    Named mine;
    for (const auto& kv : model.named_children()[o.module]->named_parameters())
      mine.emplace_back(o.module + "." + kv.key(), kv.value());
    out.push_back({o.module, make_one(o, mine), {}});
  }
  // Every trainable parameter must have an optimizer, or it would silently never train.
  for (const auto& kv : model.named_parameters()) {
    if (!kv.value().requires_grad()) continue;
    const auto dot = kv.key().find('.');
    const std::string owner = dot == std::string::npos ? "" : kv.key().substr(0, dot);
    const bool covered = std::any_of(specs.begin(), specs.end(),
                                     [&](const OptimizerOptions& o) { return o.module == owner; });
    if (covered) continue;
    if (owner.empty())
      throw placed(specs[0].where, "parameter '" + kv.key() +
                                       "' of the model is in no module, so no [optimizers.NAME] "
                                       "can train it; put it in a module, or use one [optimizer]");
    throw placed(specs[0].where, "module '" + owner +
                                     "' has trainable parameters but no optimizer; add an "
                                     "[optimizers." +
                                     owner + "] table (or freeze it)");
  }
  return with_configured(std::move(out));
}

void check_trainable(const torch::nn::Module& model, const std::string& where) {
  const auto params = model.parameters();
  if (std::any_of(params.begin(), params.end(),
                  [](const at::Tensor& p) { return p.requires_grad(); }))
    return;
  throw placed(where, "the task's model has no trainable parameter (" +
                          (params.empty() ? std::string("it has no parameters")
                                          : std::to_string(params.size()) +
                                                " parameters, none with requires_grad on") +
                          "), so nothing would train; the task plugin's model needs "
                          "parameters that require grad");
}

std::size_t optimizer_index(const std::vector<NamedOptimizer>& optimizers, std::string_view name) {
  std::string known;
  for (std::size_t i = 0; i < optimizers.size(); ++i) {
    if (optimizers[i].name == name) return i;
    known += (i ? ", " : "") + optimizers[i].name;
  }
  throw std::invalid_argument("no optimizer named '" + std::string(name) +
                              "'; the run's optimizers: " + known);
}

}  // namespace wick
