// TorchScript parts of a task's model. A JitModule wraps a torch::jit::Module (a scripted or
// traced model, loaded from a .pt file) as a torch::nn::Module: registered as a submodule of
// the task's model, the trainer moves it to the run's device, switches it between train and
// eval, checkpoints it and fingerprints it, as any layer.
//
//   wick::JitModule enc = register_module("enc", wick::JitModule(wick::JitModule::load(
//       path), wick::JitMode::frozen));
//   auto y = enc->forward(x);
//
// Frozen: its parameters are registered as buffers with requires_grad off (checkpointed,
// never trained), and the scripted module stays in eval mode (batch norms keep their running
// statistics). Trainable: registered as parameters (the optimizer trains those whose
// requires_grad the file has on; since SDK 2.21, before which every one was trained), and
// train / eval follow the model's. Either way they are the TorchScript module's own tensors,
// shared, never copies; the tensors keep the scripted module's names (enc.fc.weight). Tied
// weights (one tensor under two names) are registered once, under the first name (since 2.21:
// before, twice, and stepped twice). A part's tensors must be its own: one that is also a
// tensor of the rest of the model is refused when the fit starts.
// Use torch.jit.script or trace, not torch.jit.freeze (a frozen graph holds its weights as
// constants, which no device move or checkpoint reaches). This header includes LibTorch and
// its TorchScript runtime (<torch/script.h>).
#pragma once

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "wick/checkpointed.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// Frozen: not trained (buffers); trainable: trained (parameters).
enum class JitMode { frozen, trainable };

class JitModuleImpl : public torch::nn::Module {
 public:
  JitModuleImpl(torch::jit::Module module, JitMode mode)
      : torch::nn::Module("wick::JitModule"), jit_(std::move(module)), mode_(mode) {
    std::unordered_set<const void*> seen;
    mirror(*this, jit_, mode == JitMode::trainable, seen);
    train(is_training());
  }

  // Loads a TorchScript file onto the CPU (the trainer moves it with the rest of the model).
  // TorchScript runs without the graph executor's optimizing pass: its differentiable graphs
  // train the sample transformer 1.46x slower on the CPU (bench/README.md, peers).
  // Process-wide, as LibTorch has it; set before a part's first run, so every run takes the
  // same path.
  static torch::jit::Module load(const std::string& path) {
    torch::jit::setGraphExecutorOptimize(false);
    return torch::jit::load(path, torch::kCPU);
  }

  // torch::nn::Module::train is virtual: the trainer's train()/eval() reach the scripted
  // module's own `training` flags (dropout, batch norm) through this. A frozen part stays in
  // eval: its batch norms use their running statistics and never update them, and its
  // dropout is off, as a fixed feature extractor should be.
  void train(bool on = true) override {
    torch::nn::Module::train(on);
    jit_.train(on && mode_ == JitMode::trainable);
  }

  at::Tensor forward(const at::Tensor& x) {
    if (checkpointed_)
      return wick::checkpointed(
          [this](const at::Tensor& t) { return jit_.forward({t}).toTensor(); }, x);
    return jit_.forward({x}).toTensor();
  }
  // Any other signature: the scripted forward's arguments and result as IValues.
  c10::IValue forward_values(std::vector<c10::IValue> inputs) {
    return jit_.forward(std::move(inputs));
  }

  JitMode mode() const { return mode_; }
  // Since SDK 2.6: forward(x) (not forward_values) runs as one checkpointed segment
  // (wick/checkpointed.hpp): the part keeps no activations for backward and recomputes them.
  // The activation_checkpointing plugin sets it for parts its globs name.
  void set_checkpointed(bool on) { checkpointed_ = on; }
  bool is_checkpointed() const { return checkpointed_; }
  torch::jit::Module& jit() { return jit_; }

 private:
  // One plain module per scripted submodule, so that the names match the scripted ones.
  struct Part : torch::nn::Module {
    Part() : torch::nn::Module("wick::JitModule::Part") {}
  };

  // Registers the scripted module's tensors (the same tensors: moves and loads happen in
  // place, so the scripted module sees them) on `into`, recursively. A tensor seen already
  // (tied weights, a submodule under two names) is registered once, under its first name, so
  // that it is stepped once, as torch.optim does. Trainable parameters keep the file's
  // requires_grad: one frozen in Python stays frozen.
  static void mirror(torch::nn::Module& into, const torch::jit::Module& from, bool trainable,
                     std::unordered_set<const void*>& seen) {
    for (const auto& p : from.named_parameters(/*recurse=*/false)) {
      if (!seen.insert(p.value.unsafeGetTensorImpl()).second) continue;
      if (trainable)
        into.register_parameter(p.name, p.value, p.value.requires_grad());
      else
        into.register_buffer(p.name, p.value.set_requires_grad(false));
    }
    for (const auto& b : from.named_buffers(/*recurse=*/false))
      if (seen.insert(b.value.unsafeGetTensorImpl()).second) into.register_buffer(b.name, b.value);
    for (const auto& c : from.named_children()) {
      auto part = std::make_shared<Part>();
      mirror(*part, c.value, trainable, seen);
      into.register_module(c.name, part);
    }
  }

  torch::jit::Module jit_;
  JitMode mode_;
  bool checkpointed_ = false;
};
TORCH_MODULE(JitModule);

}  // namespace wick

WICK_PUBLIC_END
