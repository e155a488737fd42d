// Bare tensors trained without a module of their own: a TensorModule holds named tensors as
// parameters (trained) or buffers (not trained), so a task returns it as its model, or
// registers it as a submodule, and the trainer moves, trains, checkpoints and fingerprints
// them like any layer's weights. This header includes LibTorch.
//
//   wick::TensorModule t;
//   auto& w = t->add("w", torch::zeros({3}));           // trained
//   t->add("scale", torch::ones({1}), /*trainable=*/false);
#pragma once

#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <utility>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

class TensorModuleImpl : public torch::nn::Module {
 public:
  TensorModuleImpl() : torch::nn::Module("wick::TensorModule") {}
  // Registers `init` (the tensor itself, not a copy) under `name`: letters, digits and '_'.
  // Returns the registered tensor, which stays valid (moves to a device happen in place).
  at::Tensor& add(const std::string& name, at::Tensor init, bool trainable = true) {
    return trainable ? register_parameter(name, std::move(init))
                     : register_buffer(name, std::move(init).set_requires_grad(false));
  }
  // The tensor registered under `name` (a parameter or a buffer; a handle to the same
  // storage); throws when there is none.
  at::Tensor operator[](const std::string& name) const {
    if (const auto* p = named_parameters(false).find(name)) return *p;
    if (const auto* b = named_buffers(false).find(name)) return *b;
    throw std::out_of_range("wick::TensorModule has no tensor named '" + name + "'");
  }
};
TORCH_MODULE(TensorModule);

}  // namespace wick

WICK_PUBLIC_END
