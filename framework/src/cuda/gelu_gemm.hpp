// Private, in the CUDA module: matrix products with GELU in cuBLASLt's epilogue, for
// wick::gelu_mlp (ops/gelu_mlp.cpp). Row-major bf16 matrices, contiguous, on one GPU, on the
// current stream. Each returns false, having written nothing, where cuBLASLt cannot take the
// product (no copy of cuBLASLt loaded by LibTorch, sizes not multiples of 8, no algorithm):
// the caller then takes the separate operations.
#pragma once

#include <ATen/core/Tensor.h>

namespace wick::cuda {

// Forward: pre = x w^T + b and out = gelu_tanh(pre), one product (x [rows, in], w [out, in],
// b [out]; pre and out [rows, out]).
bool lt_gelu_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                     const at::Tensor& out, const at::Tensor& pre);

// Backward through the product that follows the GELU (y = gelu(pre) w^T + ...): d_pre =
// (dy w) * gelu_tanh'(pre) and d_bias = d_pre summed over the rows, one product (dy [rows,
// out], w [out, in], pre and d_pre [rows, in], d_bias [in]).
bool lt_gelu_backward(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& pre,
                      const at::Tensor& d_pre, const at::Tensor& d_bias);

}  // namespace wick::cuda
