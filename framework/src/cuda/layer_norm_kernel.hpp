// Private: the CUDA kernels behind wick::layer_norm and wick::add_layer_norm
// (wick/normalization.hpp), declared without LibTorch so that nvcc compiles
// layer_norm_kernel.cu without LibTorch's headers.
#pragma once

#include <cstdint>

#include "cuda/row_type.hpp"

namespace wick::cuda {

// One warp per row of `rows` x `width` contiguous values: s = x + branch (float, written to s)
// when branch is not null, else s = x; the row's mean and rstd = 1 / sqrt(var + eps) (float
// [rows]); y = (s - mean) rstd w + bias in y's type. A branch comes with a float x.
void launch_layer_norm_forward(const void* x, RowType x_type, const void* branch,
                               RowType branch_type, float* s, void* y, RowType y_type,
                               const float* w, const float* bias, float eps, std::int64_t rows,
                               std::int64_t width, float* mean, float* rstd, void* stream);

// The gradients from the same rows: dx = rstd (g - mean(g) - xhat mean(g xhat)) + ds (when not
// null), g = dy w, xhat = (s - mean) rstd, written in s's type (dx) and in the branch's
// (d_branch, when not null); ds is in s's type. dw = sum over rows of dy xhat, db = sum of dy
// (float [width]), summed in a fixed order through `partial` (float, layer_norm_partials(rows,
// width) values), so that they are the same from run to run.
void launch_layer_norm_backward(const void* s, RowType s_type, const void* dy, RowType dy_type,
                                const void* ds, const float* w, const float* mean,
                                const float* rstd, std::int64_t rows, std::int64_t width, void* dx,
                                void* d_branch, RowType branch_type, float* dw, float* db,
                                float* partial, void* stream);

// How many floats launch_layer_norm_backward's `partial` holds.
std::int64_t layer_norm_partials(std::int64_t rows, std::int64_t width);

}  // namespace wick::cuda
