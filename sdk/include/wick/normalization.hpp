// Layer normalisation with kernels of wick's own (since SDK 2.15). This header includes
// LibTorch's ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (weight and bias
// [width]), what at::layer_norm(x, {width}, weight, bias, eps) gives, differentiable with
// respect to x, weight and bias. Under autocast on x's device the result is in autocast's type
// when that is bf16 (what the matrix product that follows a normalisation casts it to anyway,
// so that the cast is not a pass of its own); otherwise in x's type. For float32 and bf16 x
// with float32 weight and bias, on the CPU (vectorised) and on a GPU, one kernel forward and
// one backward, in float; elsewhere LibTorch's layer_norm, then the cast.
WICK_EXPORT at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, double eps = 1e-5);

// A pre-norm transformer's residual step in one pass: {s, layer_norm(s, weight, bias, eps)}
// with s = residual + branch (residual [..., width], branch of the same shape; s in the
// promoted type, as `residual + branch`). The normalised result's type follows layer_norm's
// rule. With a float32 residual (bf16 autocast's residual stream: float + bf16 is float) the
// sum, the normalisation and, backward, the gradients of both inputs are one kernel each way;
// otherwise the sum is a pass of its own.
WICK_EXPORT std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& residual,
                                                             const at::Tensor& branch,
                                                             const at::Tensor& weight,
                                                             const at::Tensor& bias,
                                                             double eps = 1e-5);

}  // namespace wick

WICK_PUBLIC_END
