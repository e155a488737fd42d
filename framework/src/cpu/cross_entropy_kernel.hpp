// Cross-entropy over rows of float32 or bfloat16 logits (computed in float), forward and
// backward, each one vectorised pass over a row (vec_math.hpp). wick::cross_entropy
// (ops/cross_entropy.cpp) runs them on the CPU.
#pragma once

#include <cstdint>

#include "cpu/bf16.hpp"

namespace wick::cpu {

// For `rows` rows of `classes` logits: each row's log-sum-exp as two floats, its maximum m and
// log sum exp(x - m), into stats[2r] and stats[2r + 1] (the gradient's x - m is then exact near
// m, where a single m + log(...) would round it), and its loss (the log-sum-exp minus its
// target's logit; 0 where the target is ignore_index) into loss[r]. The targets are class ids
// or ignore_index (the caller checks).
void cross_entropy_rows(const float* logits, const std::int64_t* target, std::int64_t rows,
                        std::int64_t classes, std::int64_t ignore_index, float* loss, float* stats);
void cross_entropy_rows(const Bf16* logits, const std::int64_t* target, std::int64_t rows,
                        std::int64_t classes, std::int64_t ignore_index, float* loss, float* stats);
// The rows' gradient: (softmax - one-hot) x scale, 0 on a row whose target is ignore_index.
void cross_entropy_grad(const float* logits, const std::int64_t* target, const float* stats,
                        std::int64_t rows, std::int64_t classes, std::int64_t ignore_index,
                        float scale, float* grad);
void cross_entropy_grad(const Bf16* logits, const std::int64_t* target, const float* stats,
                        std::int64_t rows, std::int64_t classes, std::int64_t ignore_index,
                        float scale, Bf16* grad);

}  // namespace wick::cpu
