// One optimizer's table ([optimizer] or [optimizers.MODULE]): its options, checked, and its
// parameter groups ([[...groups]]).
#include <algorithm>
#include <optional>
#include <string_view>

#include "config/config_impl.hpp"
#include "config/schemas.hpp"

namespace wick {

const char* to_string(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::adam:
      return "adam";
    case OptimizerKind::adamw:
      return "adamw";
    case OptimizerKind::sgd:
      return "sgd";
  }
  return "?";
}

std::optional<OptimizerKind> optimizer_kind(std::string_view name) {
  for (auto k : {OptimizerKind::adam, OptimizerKind::adamw, OptimizerKind::sgd})
    if (name == to_string(k)) return k;
  return std::nullopt;
}

// One optimizer's table: its options and its [[...groups]].
OptimizerOptions Config::Impl::read_optimizer(const toml::table* ot, const std::string& section,
                                              const std::string& module) const {
  const toml::table empty;
  OptimizerOptions o;
  o.module = module;
  o.where = ot ? where(ot->source()) : path;
  Params op = validate(ot ? *ot : empty, optimizer_schema(), section, {"groups"}, "optimizer",
                       module.empty() ? "optimizer" : module);
  o.kind = *optimizer_kind(op.get_string("name"));  // one of the schema's choices
  o.lr = op.get_float("lr");
  o.weight_decay = op.get_float("weight_decay");
  o.weight_decay_set = ot && ot->contains("weight_decay");
  o.betas = op.get_float_list("betas");
  o.eps = op.get_float("eps");
  o.amsgrad = op.get_bool("amsgrad");
  o.fused = op.get_bool("fused");
  o.momentum = op.get_float("momentum");
  o.dampening = op.get_float("dampening");
  o.nesterov = op.get_bool("nesterov");
  auto check = [&](const Params& p, const char* key, bool ok, const std::string& msg) {
    this->check(p, key, ok, msg, section, o.where);
  };
  const bool sgd = o.kind == OptimizerKind::sgd;
  check(op, "lr", std::isfinite(o.lr) && o.lr > 0, "must be a finite number > 0");
  check(op, "betas", o.betas.size() == 2, "needs two values, e.g. [0.9, 0.999]");
  check(op, "betas",
        std::all_of(o.betas.begin(), o.betas.end(), [](double b) { return b >= 0 && b < 1; }),
        "must each be in [0, 1), e.g. [0.9, 0.999]");
  check(op, "eps", std::isfinite(o.eps) && o.eps > 0, "must be a finite number > 0");
  check(op, "fused", !o.fused || !sgd, "is for name = \"adam\" or \"adamw\"");
  check(op, "weight_decay", std::isfinite(o.weight_decay) && o.weight_decay >= 0,
        "must be a finite number >= 0");
  check(op, "momentum", o.momentum >= 0 && o.momentum <= 1, "must be in [0, 1]");
  check(op, "dampening", o.dampening >= 0 && o.dampening <= 1, "must be in [0, 1]");
  check(op, "nesterov", !o.nesterov || (o.momentum > 0 && o.dampening == 0),
        "needs momentum > 0 and dampening = 0");
  if (ot) {
    const std::vector<std::string> adam_only = {"betas", "eps", "amsgrad"};
    const std::vector<std::string> sgd_only = {"momentum", "dampening", "nesterov"};
    const auto& wrong = sgd ? adam_only : sgd_only;
    for (const auto& k : wrong)
      if (auto* n = ot->get(k))
        throw error(where(*n), "'" + k + "' in " + section + " does not apply to " +
                                   to_string(o.kind) + " (it is for " +
                                   (sgd ? "adam and adamw" : "sgd") +
                                   "); remove it or change name");
  }
  if (const auto* g = ot ? ot->get("groups") : nullptr) {
    const auto* arr = g->as_array();
    if (!arr || !arr->is_array_of_tables())
      throw error(where(*g), "'groups' in " + section + " must be tables: [[" +
                                 section.substr(1, section.size() - 2) +
                                 ".groups]] with params = \"glob\"");
    const std::string gsection = "[[" + section.substr(1, section.size() - 2) + ".groups]]";
    for (auto& n : *arr) {
      const auto& t = *n.as_table();
      Params gp = validate(t, group_schema(), gsection, {}, "optimizer", "group");
      ParamGroupOptions go;
      go.params = gp.get_string("params");
      go.where = where(t.source());
      if (t.contains("lr")) {
        go.lr = gp.get_float("lr");
        if (!(std::isfinite(*go.lr) && *go.lr > 0))
          throw error(where(*t.get("lr")), "'lr' in " + gsection + " must be a finite number > 0");
      }
      if (t.contains("weight_decay")) {
        go.weight_decay = gp.get_float("weight_decay");
        if (!(std::isfinite(*go.weight_decay) && *go.weight_decay >= 0))
          throw error(where(*t.get("weight_decay")),
                      "'weight_decay' in " + gsection + " must be >= 0");
      }
      if (go.params.empty()) throw error(where(*t.get("params")), "'params' must not be empty");
      o.groups.push_back(std::move(go));
    }
  }
  return o;
}

}  // namespace wick
