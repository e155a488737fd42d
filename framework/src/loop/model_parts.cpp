#include "loop/model_parts.hpp"

#include <torch/torch.h>

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace wick {

namespace {

// A TorchScript part's tensor that is also one of the rest of the model.
void check_jit_parts_own_their_tensors(const torch::nn::Module& model) {
  // JitModule lives in a header (wick/jit.hpp) that libwick does not include (it brings the
  // TorchScript runtime), so its parts are recognised by the name its constructor gives.
  // tensor -> (the part's prefix, the part's name for it)
  std::map<const void*, std::pair<std::string, std::string>> owner;
  for (const auto& m : model.named_modules("", /*include_self=*/true)) {
    if (m.value()->name() != "wick::JitModule") continue;
    const std::string prefix = m.key().empty() ? "" : m.key() + ".";
    for (const auto& t : m.value()->named_parameters(true))
      owner.emplace(t.value().unsafeGetTensorImpl(), std::make_pair(prefix, prefix + t.key()));
    for (const auto& t : m.value()->named_buffers(true))
      owner.emplace(t.value().unsafeGetTensorImpl(), std::make_pair(prefix, prefix + t.key()));
  }
  if (owner.empty()) return;
  auto check = [&](const std::string& name, const at::Tensor& t) {
    auto it = owner.find(t.unsafeGetTensorImpl());
    if (it == owner.end() || name.rfind(it->second.first, 0) == 0) return;
    throw std::runtime_error(
        "the model's tensor '" + name + "' is also '" + it->second.second +
        "' of a TorchScript part (wick::JitModule): a part's parameters must be its own "
        "(register the part once, and give the rest of the model its own tensors, e.g. "
        "clone() them)");
  };
  for (const auto& t : model.named_parameters(true)) check(t.key(), t.value());
  for (const auto& t : model.named_buffers(true)) check(t.key(), t.value());
}

// One tensor under two names would be stepped twice: LibTorch's optimizers take the list as
// given, where torch.optim's model.parameters() drops repeats.
void check_parameters_once(const torch::nn::Module& model) {
  std::map<const void*, std::string> first_name;
  for (const auto& t : model.named_parameters(true)) {
    const auto [it, fresh] = first_name.emplace(t.value().unsafeGetTensorImpl(), t.key());
    if (!fresh)
      throw std::runtime_error("the model's parameters '" + it->second + "' and '" + t.key() +
                               "' are one tensor, which the optimizer would step twice; "
                               "register it once and use it in both places (tied weights)");
  }
}

}  // namespace

void check_model_parts(const torch::nn::Module& model) {
  check_jit_parts_own_their_tensors(model);
  check_parameters_once(model);
}

std::string first_non_finite(const torch::nn::Module& model) {
  const auto params = model.named_parameters(/*recurse=*/true);
  std::vector<at::Tensor> finite;
  finite.reserve(params.size());
  for (const auto& p : params) finite.push_back(at::isfinite(p.value()).all());
  if (finite.empty() || at::stack(finite).all().item<bool>()) return "";
  for (std::size_t i = 0; i < finite.size(); ++i)
    if (!finite[i].item<bool>()) return params[i].key();
  return "";
}

}  // namespace wick
