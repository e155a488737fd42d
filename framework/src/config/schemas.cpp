// The optimizer tables' keys, their types, defaults and one-line docs (what error messages
// show); [trainer]'s are declared with the options themselves (trainer_options.cpp).
#include "config/schemas.hpp"

#include "wick/loader.hpp"  // ParamInfo

namespace wick {

std::vector<ParamInfo> optimizer_schema() {
  return {
      {"name", ParamType::choice, "\"adam\"", "adam, adamw or sgd", {"adam", "adamw", "sgd"}},
      {"lr", ParamType::floating, "0.001", "learning rate"},
      {"weight_decay", ParamType::floating, "0.0", "weight decay (adamw default 0.01)"},
      {"betas", ParamType::float_list, "[0.9, 0.999]", "adam/adamw: coefficients"},
      {"eps", ParamType::floating, "1e-08", "adam/adamw: denominator term"},
      {"amsgrad", ParamType::boolean, "false", "adam/adamw: AMSGrad variant"},
      {"fused", ParamType::boolean, "false",
       "adam, adamw: update each float32 parameter in one pass, CPU or CUDA (same formulas, "
       "faster)"},
      {"momentum", ParamType::floating, "0.0", "sgd: momentum"},
      {"dampening", ParamType::floating, "0.0", "sgd: dampening"},
      {"nesterov", ParamType::boolean, "false", "sgd: Nesterov momentum"},
  };
}

std::vector<ParamInfo> group_schema() {
  return {
      {"params", ParamType::string, std::nullopt, "glob over parameter names, e.g. \"backbone.*\""},
      {"lr", ParamType::floating, "0.0", "this group's learning rate (default: the optimizer's)"},
      {"weight_decay", ParamType::floating, "0.0",
       "this group's weight decay (default: the optimizer's)"},
  };
}

}  // namespace wick
