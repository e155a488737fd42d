// Activation checkpointing (since SDK 2.6): a segment of the forward pass that keeps none of
// its activations for backward. Its forward runs without autograd; backward runs it again
// (the same inputs, the random generators and autocast state as in the forward, so dropout
// draws the same masks) and differentiates that. Memory: the segment's inputs instead of all
// its intermediate tensors; time: one more forward of the segment per backward.
//
//   x = wick::checkpointed(block, x);                         // a module (holder) with forward
//   x = wick::checkpointed([&](const at::Tensor& t) { return fc2(relu(fc1(t))); }, x);
//
// The gradients equal those of the plain run (bit for bit where the recomputation repeats the
// same kernels, as on the CPU). Parameters the segment uses get their gradients even when no
// input requires one. Under no_grad (validation) the segment just runs. The segment must
// depend on nothing but its inputs, its parameters and the random generators, and must not
// change tensors outside it. This header includes LibTorch.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

using Segment = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// The core: runs `segment` on `inputs` checkpointed; returns its outputs.
WICK_EXPORT std::vector<at::Tensor> checkpointed_list(Segment segment,
                                                      std::vector<at::Tensor> inputs);

namespace detail {
template <class F, class = void>
struct HasArrowForward : std::false_type {};
template <class F>
struct HasArrowForward<F, std::void_t<decltype(&std::decay_t<F>::operator->)>> : std::true_type {};

template <class F, class... T>
decltype(auto) call_segment(F& f, const T&... xs) {
  if constexpr (HasArrowForward<F>::value)
    return f->forward(xs...);  // a module holder: torch::nn::Linear, a TORCH_MODULE
  else
    return f(xs...);
}

inline std::vector<at::Tensor> as_list(at::Tensor t) {
  return {std::move(t)};
}
inline std::vector<at::Tensor> as_list(std::vector<at::Tensor> v) {
  return v;
}

template <class F, std::size_t... I>
std::vector<at::Tensor> call_on_list(F& f, const std::vector<at::Tensor>& in,
                                     std::index_sequence<I...>) {
  return as_list(call_segment(f, in[I]...));
}
}  // namespace detail

// `f` (a module holder or a callable) on tensors `xs...`, checkpointed. Returns what f returns:
// one tensor, or a std::vector of them.
template <class F, class... T>
auto checkpointed(F f, const T&... xs) {
  using R = std::decay_t<decltype(detail::call_segment(f, xs...))>;
  static_assert(std::is_same_v<R, at::Tensor> || std::is_same_v<R, std::vector<at::Tensor>>,
                "wick::checkpointed: the segment must return at::Tensor or "
                "std::vector<at::Tensor>");
  constexpr std::size_t n = sizeof...(T);
  Segment seg = [f](const std::vector<at::Tensor>& in) mutable {
    return detail::call_on_list(f, in, std::make_index_sequence<n>{});
  };
  auto out = checkpointed_list(std::move(seg), {xs...});
  if constexpr (std::is_same_v<R, at::Tensor>)
    return out.front();
  else
    return out;
}

}  // namespace wick

WICK_PUBLIC_END
