// Private, in the CUDA module: the matrix product with GELU in cuBLASLt's epilogue, for
// wick::gelu_mlp (ops/gelu_mlp.cpp). Row-major bf16 matrices, contiguous, on one GPU, on the
// current stream. Returns false, having written nothing, where cuBLASLt cannot take the
// product (no copy of cuBLASLt loaded by LibTorch, sizes not multiples of 8, no algorithm):
// the caller then takes the separate operations.
#pragma once

#include <ATen/core/Tensor.h>

namespace wick::cuda {

// Forward: pre = x w^T + b and out = gelu_tanh(pre), one product (x [rows, in], w [out, in],
// b [out]; pre and out [rows, out]).
bool lt_gelu_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                     const at::Tensor& out, const at::Tensor& pre);

}  // namespace wick::cuda
