// Activations with kernels of wick's own (since SDK 2.13). This header includes LibTorch's
// ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// GELU with the tanh approximation (GPT-2's): x / 2 (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))),
// what at::gelu(x, "tanh") gives. For float32 and bfloat16 (computed in float, rounded once) on
// the CPU it runs a vectorised kernel of wick's own, one pass forward and one backward, on
// LibTorch's threads: on an Intel Xeon with AVX-512, one thread, [4096, 256], 1.0 ms forward
// and 3.2 forward and backward against LibTorch 2.11's 3.6 and 8.4 (bfloat16: 0.9 and 2.6
// against 2.9 and 6.0). Its gradient is not differentiable again (no second derivative).
// Elsewhere (other types, devices) it is at::gelu.
WICK_EXPORT at::Tensor gelu_tanh(const at::Tensor& x);

// A transformer's feed-forward block (since SDK 2.16): linear(gelu_tanh(linear(x, fc_weight,
// fc_bias)), proj_weight, proj_bias), x [..., in], fc_weight [hidden, in], proj_weight [out,
// hidden], with their biases. On a GPU in bf16 (under bf16 autocast, or every tensor bf16)
// while autograd records, the GELU is in the first product's epilogue (cuBLASLt's
// GELU_AUX_BIAS; in, hidden and out multiples of 8), where separately it is two passes over the
// [rows, hidden] activations, and every parameter's gradient comes in its own type (float under
// autocast) from the products and sums, not cast; the result is bf16 as at::linear's under
// autocast, and that path has no second derivative (a backward with create_graph throws).
// Elsewhere, and without autograd (a decoder's inference: autocast then casts each weight once
// while its scope lives), the three operations (gelu_tanh's kernel on the CPU).
WICK_EXPORT at::Tensor gelu_mlp(const at::Tensor& x, const at::Tensor& fc_weight,
                                const at::Tensor& fc_bias, const at::Tensor& proj_weight,
                                const at::Tensor& proj_bias);

}  // namespace wick

WICK_PUBLIC_END
