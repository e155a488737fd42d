// Private: the CUDA kernels behind the biases' gradients of wick::linear and wick::gelu_mlp
// (ops/bf16_products.hpp: rows_sum_as), declared without LibTorch so that nvcc compiles
// column_sum_kernel.cu without LibTorch's headers.
#pragma once

#include <cstdint>

#include "cuda/row_type.hpp"

namespace wick::cuda {

// out[j] = the sum over the rows of g[i][j], for contiguous g [rows, width] (float32 or bf16),
// written in out's type. The sums are float, in a fixed order (over each chunk of rows, then
// over the chunks, through `partial`: column_sum_partials(rows, width) floats), so that they
// are the same from run to run. No rows: zeros.
void launch_column_sums(const void* g, RowType g_type, std::int64_t rows, std::int64_t width,
                        void* out, RowType out_type, float* partial, void* stream);

// GELU's (tanh approximation) gradient for contiguous bf16 dh and pre [rows, width]:
// d = dh gelu'(pre), written to d (bf16), and the column sums of d as written, as
// launch_column_sums sums them: a bias's gradient in the same pass over the rows.
void launch_gelu_backward_sums(const void* dh, const void* pre, std::int64_t rows,
                               std::int64_t width, void* d, void* out, RowType out_type,
                               float* partial, void* stream);

// How many floats those kernels' `partial` holds (0: none is needed).
std::int64_t column_sum_partials(std::int64_t rows, std::int64_t width);

}  // namespace wick::cuda
