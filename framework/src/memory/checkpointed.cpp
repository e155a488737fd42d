// wick::checkpointed_list (wick/checkpointed.hpp): a custom autograd function whose forward
// runs the segment without autograd and whose backward runs it again with autograd and
// differentiates that (a reentrant backward, as torch.utils.checkpoint's reentrant variant).
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "cuda/cuda_support.hpp"
#include "wick/checkpointed.hpp"
#include "wick/torch_compat.hpp"

namespace wick {

namespace {

// The random generators a segment may draw from: the CPU's, and the default generator of each
// CUDA device its inputs are on.
struct RngStates {
  std::vector<std::pair<c10::Device, at::Tensor>> states;

  static RngStates capture(const std::vector<at::Tensor>& inputs) {
    RngStates r;
    std::vector<c10::Device> devices{c10::Device(c10::kCPU)};
    for (const auto& t : inputs)
      if (t.defined() && t.is_cuda() &&
          std::find(devices.begin(), devices.end(), t.device()) == devices.end())
        devices.push_back(t.device());
    for (const auto& d : devices) {
      // LibTorch refuses to read a CUDA generator's state while its stream captures, and a
      // graph-safe state is shared, not a copy to go back to.
      if (d.is_cuda() && cuda::capturing(d))
        throw std::runtime_error(
            "activation checkpointing (wick::checkpointed) cannot run inside a captured CUDA "
            "graph: it keeps the CUDA random generator's state for the recomputation, which "
            "LibTorch does not allow during capture; remove cuda_graph or "
            "activation_checkpointing");
      auto gen = d.is_cpu() ? at::detail::getDefaultCPUGenerator()
                            : at::globalContext().defaultGenerator(d);
      std::lock_guard<std::mutex> lock(gen.mutex());
      r.states.emplace_back(d, gen.get_state());
    }
    return r;
  }
  void restore() const {
    for (const auto& [d, state] : states) {
      auto gen = d.is_cpu() ? at::detail::getDefaultCPUGenerator()
                            : at::globalContext().defaultGenerator(d);
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    }
  }
};

// Autocast as the forward saw it (mixed_precision turns it on for the forward stage only;
// backward runs outside it), for the CPU and CUDA.
struct AutocastState {
  struct One {
    c10::DeviceType type;
    bool on;
    at::ScalarType dtype;
  };
  std::vector<One> kinds;
  static AutocastState capture() {
    AutocastState a;
    for (auto t : {c10::DeviceType::CPU, c10::DeviceType::CUDA})
      a.kinds.push_back({t, compat::autocast_enabled(t), compat::autocast_dtype(t)});
    return a;
  }
  void apply() const {
    for (const auto& k : kinds) {
      compat::set_autocast_enabled(k.type, k.on);
      compat::set_autocast_dtype(k.type, k.dtype);
    }
  }
  bool any() const {
    for (const auto& k : kinds)
      if (k.on) return true;
    return false;
  }
};

// What backward needs besides the saved inputs.
struct SegmentState : torch::CustomClassHolder {
  Segment segment;
  RngStates rng;
  AutocastState autocast;
  std::vector<bool> needs_grad;  // per real input
  std::size_t tensor_args = 0;   // the real inputs, and the placeholder when there is one
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<SegmentState> st,
                                                at::TensorList inputs, std::size_t n_real) {
    std::vector<at::Tensor> real(inputs.begin(), inputs.begin() + static_cast<long>(n_real));
    ctx->save_for_backward(real);
    st->rng = RngStates::capture(real);
    st->autocast = AutocastState::capture();
    auto outs = st->segment(real);  // autograd is off inside a Function's forward
    ctx->saved_data["segment"] = c10::IValue::make_capsule(st);
    return outs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* st = static_cast<SegmentState*>(ctx->saved_data["segment"].toCapsule().get());
    auto saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    for (std::size_t i = 0; i < saved.size(); ++i) {
      auto d = saved[i].detach();
      d.requires_grad_(st->needs_grad[i]);
      inputs.push_back(std::move(d));
    }
    // The generators as the forward found them; then back to where the run is now, so that
    // the rest of the run draws what it would without checkpointing.
    std::vector<at::Tensor> outs;
    {
      const auto now = RngStates::capture(inputs);
      const auto autocast_now = AutocastState::capture();
      st->rng.restore();
      st->autocast.apply();
      struct Back {
        const RngStates& rng;
        const AutocastState& autocast;
        bool clear_cache;
        ~Back() {
          rng.restore();
          autocast.apply();
          if (clear_cache) at::autocast::clear_cache();  // casts made for the recomputation
        }
      } back{now, autocast_now, st->autocast.any() && !autocast_now.any()};
      torch::AutoGradMode on(true);
      outs = st->segment(inputs);
    }
    std::vector<at::Tensor> roots, root_grads;
    for (std::size_t i = 0; i < outs.size() && i < grads.size(); ++i)
      if (outs[i].defined() && outs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outs[i]);
        root_grads.push_back(grads[i]);
      }
    // Accumulates into the segment's parameters and into the detached inputs.
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    // One gradient per forward argument: none for the state, the inputs', none for the count.
    torch::autograd::variable_list result{at::Tensor()};
    for (std::size_t i = 0; i < inputs.size(); ++i)
      result.push_back(st->needs_grad[i] ? inputs[i].grad() : at::Tensor());
    result.resize(1 + st->tensor_args + 1);  // the placeholder's and the count's: none
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> checkpointed_list(Segment segment, std::vector<at::Tensor> inputs) {
  if (!at::GradMode::is_enabled()) return segment(inputs);
  auto st = c10::make_intrusive<SegmentState>();
  st->segment = std::move(segment);
  bool any = false;
  for (const auto& t : inputs) {
    st->needs_grad.push_back(t.defined() && t.requires_grad());
    any = any || st->needs_grad.back();
  }
  const std::size_t n_real = inputs.size();
  // Autograd records a function only when an input requires a gradient; the segment's
  // parameters need its backward even when none does (the first block of a network).
  if (!any) inputs.push_back(torch::empty({0}, torch::requires_grad()));
  st->tensor_args = inputs.size();
  return CheckpointFunction::apply(st, at::TensorList(inputs), n_real);
}

}  // namespace wick
