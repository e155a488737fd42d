// A linear layer's product whose parameter gradients on a GPU in bf16 come out in the
// parameters' own type (since SDK 2.17). This header includes LibTorch's ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// x weight^T + bias (x [..., in], weight [out, in], bias [out] or undefined), what
// at::linear(x, weight, bias) gives. On a GPU in bf16 (under bf16 autocast, or every tensor
// bf16) while autograd records, it runs the same products, but backward the weight's and the
// bias's gradients are written in their own type (float under autocast) by the product (on a
// GPU of compute capability 8.0 or newer, with LibTorch 2.8 or newer) and the row sum
// themselves, each value rounded once, where at::linear under autocast makes them in bf16 and
// casts each to float in a pass of its own; the result is bf16, as at::linear's under autocast,
// and that path has no second derivative (a backward with create_graph throws). Elsewhere
// at::linear.
WICK_EXPORT at::Tensor linear(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& bias = {});

}  // namespace wick

WICK_PUBLIC_END
