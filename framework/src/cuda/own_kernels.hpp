// Private: WICK_CUDA_DISABLE (README: CUDA paths), the switch that leaves wick's own CUDA
// kernels unused, LibTorch's operators in their place: to tell a fault or a slowdown of one of
// them from the model's, and to time what each wins. Torch-free.
#pragma once

#include <cstddef>
#include <string>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for the white-box tests (tests/), which link libwick; not an installed header.
WICK_PUBLIC_BEGIN

namespace wick::cuda {

// What each name hides on a GPU (the CPU keeps its own kernels):
//   layer_norm     wick::layer_norm / add_layer_norm's kernels: at::layer_norm (and an add)
//   cross_entropy  wick::cross_entropy's kernels: at::log_softmax and at::nll_loss
//   gelu_mlp       gelu_mlp's function (the GELU in cuBLASLt's epilogue): at::linear, GELU,
//                  at::linear
//   linear         wick::linear's function (float gradients from bf16 products): at::linear
//   adam           fused Adam's multi-tensor kernel: torch::optim's tensor operations
//   bf16_copies    the bf16 copies of the weights that kernel writes (optim/bf16_copies.hpp):
//                  wick::linear and gelu_mlp cast each weight on every forward
//   bias_grad      the column sums of wick::linear's and gelu_mlp's bias gradients (and
//                  gelu_mlp's GELU gradient with its bias's): at::sum (at::gelu_backward)
enum class OwnKernel : unsigned {
  layer_norm,
  cross_entropy,
  gelu_mlp,
  linear,
  adam,
  bf16_copies,
  bias_grad
};
inline constexpr const char* kOwnKernelNames[] = {
    "layer_norm", "cross_entropy", "gelu_mlp", "linear", "adam", "bf16_copies", "bias_grad"};
inline constexpr std::size_t kOwnKernels = std::size(kOwnKernelNames);

// A WICK_CUDA_DISABLE value (names separated by commas, "all" for every one; spaces around a
// name are dropped) as a set of bits, 1 << OwnKernel; a name that is none of them throws
// std::invalid_argument naming the variable and the names it takes. A program of its own (not
// `wick`, which checks at start) meets that at its first call that asks.
unsigned parse_own_kernels(const std::string& text);

// The names of a set in kOwnKernelNames's order, between them `separator` ("" for none).
std::string own_kernel_names(unsigned set, const char* separator = ", ");

// The set WICK_CUDA_DISABLE names, read and checked once (throws as parse_own_kernels).
unsigned hidden_own_kernels();

// Whether `k` is hidden. A fresh process reads WICK_CUDA_DISABLE; a test may set the set.
bool hidden(OwnKernel k);
void set_hidden_own_kernels(unsigned set);

}  // namespace wick::cuda

WICK_PUBLIC_END
