// Private: what wick's autograd functions for matrix products in bf16 share (gelu_mlp, linear):
// whether a call takes them, and parameter gradients made in the parameters' own (float) type
// by the products themselves rather than in bf16 and then cast, a pass per parameter a step
// (GPT-2 124M under bf16 autocast on an H100: 97 of its step's 123 casts to float, which
// took 1.6 ms of 41).
#pragma once

#include <ATen/core/Tensor.h>

#include <initializer_list>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for the white-box tests (tests/), which link libwick; not an installed header.
WICK_PUBLIC_BEGIN

namespace wick {

// Whether these take the bf16 function: on a GPU, float32 or bf16 tensors under bf16 autocast
// (which would cast them for the products), or every tensor bf16 and autocast off. An
// undefined parameter (an absent bias) is left out.
bool takes_bf16_products(const at::Tensor& x, std::initializer_list<const at::Tensor*> params);

// A parameter in the products' type: in bf16 the copy fused Adam's kernel keeps of a float
// parameter where it holds the parameter's value (optim/bf16_copies.hpp; not with
// WICK_CUDA_DISABLE=bf16_copies), else a cast, the same values.
at::Tensor param_as(const at::Tensor& p, at::ScalarType type);

// a [m, k] times b [k, n], the result in `type`. On a GPU of compute capability 8.0 or newer
// with LibTorch 2.8 or newer, a bf16 product with a float result writes its float sums directly
// (LibTorch's mm with an out_dtype: each value rounded once, and no cast); elsewhere the
// product, then the cast.
at::Tensor product_as(const at::Tensor& a, const at::Tensor& b, at::ScalarType type);

// Whether rows_sum_as takes wick's column sums kernel for g (cuda/column_sum_kernel.hpp): g
// float32 or bf16 [rows, n] on a GPU, `type` float32 or bf16, WICK_CUDA_DISABLE without
// bias_grad.
bool column_sums_take(const at::Tensor& g, at::ScalarType type);

// g [rows, n] summed over its rows into `type` (a bias's gradient): accumulated in float and
// written in `type` in one pass: wick's kernel where column_sums_take (at::sum ran at about a
// quarter of an H200's memory speed), else at::sum.
at::Tensor rows_sum_as(const at::Tensor& g, at::ScalarType type);

}  // namespace wick

WICK_PUBLIC_END
