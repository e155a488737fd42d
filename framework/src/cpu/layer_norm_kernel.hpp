// Layer normalisation over float rows, forward and backward, each one vectorised pass per row
// after the row's sums (vec_math.hpp). wick::layer_norm and wick::add_layer_norm
// (ops/layer_norm.cpp) run them on the CPU, widening bf16 rows into float first.
#pragma once

#include <cstdint>

namespace wick::cpu {

// For `rows` rows of `width`: s = x + b written to `s` when b is given (else s is x itself);
// the row's mean and rstd = 1 / sqrt(var + eps), var the mean of (s - mean)^2 (LibTorch's);
// y = (s - mean) rstd w + bias.
void layer_norm_forward(const float* x, const float* b, float* s, std::int64_t rows,
                        std::int64_t width, const float* w, const float* bias, float eps, float* y,
                        float* mean, float* rstd);

// The gradients for the same rows, given the rows' s, mean and rstd and dy: dx = rstd (g -
// mean(g) - xhat mean(g xhat)) with g = dy w and xhat = (s - mean) rstd, plus ds when given;
// dw += dy xhat and db += dy, summed over the rows into the caller's [width] arrays.
void layer_norm_backward(const float* s, const float* dy, const float* ds, std::int64_t rows,
                         std::int64_t width, const float* w, const float* mean, const float* rstd,
                         float* dx, float* dw, float* db);

}  // namespace wick::cpu
