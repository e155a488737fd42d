// Scaled dot-product attention over one head's rows, forward and backward, for short sequences
// and heads of 16 values (a small model's): a row is one 16-float vector (vec_math.hpp), a
// head's keys, values and probabilities stay in the cache, each query row's scores are a few
// vectors over keys, and the probabilities are kept for the backward instead of being
// recomputed. wick::scaled_dot_product_attention (ops/attention.cpp) runs them on the CPU, one
// head per task. Wider heads are left to LibTorch, whose kernels were as fast or faster there.
#pragma once

#include <cstdint>

namespace wick::cpu {

// The sizes the kernels take: up to kAttentionMaxTokens tokens, heads of kAttentionHeadSize.
constexpr std::int64_t kAttentionMaxTokens = 256, kAttentionHeadSize = 16;

// A row's probabilities padded to whole 16-float vectors: the stride of `probs`.
constexpr std::int64_t attention_padded(std::int64_t tokens) {
  return (tokens + 15) / 16 * 16;
}

// A matrix's rows: row t starts at data + t * stride, its 16 values contiguous.
template <class T>
struct RowsOf {
  T* data = nullptr;
  std::int64_t stride = 0;
  T* row(std::int64_t t) const { return data + t * stride; }
};
using Rows = RowsOf<float>;
using ConstRows = RowsOf<const float>;

// One head of `tokens` rows in each matrix. Query i attends to keys 0..i when `causal`, to all
// of them otherwise; scores are scaled by `scale`.
struct AttentionHead {
  std::int64_t tokens = 0;
  bool causal = false;
  float scale = 1;
  ConstRows q, k, v;
  // The forward's output; the backward reads it.
  Rows out;
  // [tokens, attention_padded(tokens)]: the forward writes the probabilities (0 past a row's
  // last key) when not null; the backward reads them.
  float* probs = nullptr;
  // The backward's: the output's gradient in, the inputs' out.
  ConstRows d_out;
  Rows d_q, d_k, d_v;
};

// Floats of scratch memory a call needs (one task's, reused from head to head).
std::int64_t attention_scratch_floats(std::int64_t tokens);

// out = softmax(scale q k^T, masked) v; probs when given.
void attention_forward(const AttentionHead& head, float* scratch);
// d_q, d_k, d_v from d_out, out and probs (the forward's, kept).
void attention_backward(const AttentionHead& head, float* scratch);

}  // namespace wick::cpu
