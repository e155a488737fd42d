// Attention with a kernel of wick's own (since SDK 2.14). This header includes LibTorch's ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// Scaled dot-product attention, softmax(q k^T / sqrt(E) [+ causal mask]) v over q, k, v
// [..., L, E] (keys masked past each query's position when `is_causal`), with dropout on the
// probabilities when dropout_p > 0: what at::scaled_dot_product_attention(q, k, v, {},
// dropout_p, is_causal) gives; on LibTorch 1.13, which has none, the same computation spelled
// out. For float32 or bfloat16 (computed in float, the results rounded once) on the CPU without
// dropout, with q, k, v of one shape [batch, heads, L, 16] (a small model's narrow heads) and L
// up to 256, a vectorised kernel of wick's own that keeps each head's probabilities for the
// backward; the inputs may be views with any strides but a contiguous last dimension (heads
// split off one packed projection are read in place). On an Intel Xeon with AVX-512, one
// thread, [64, 4, 64, 16] causal heads of a packed projection: forward and backward 1.4-1.6x
// LibTorch 2.11's in float32, 13x in bfloat16. Its output is [batch, L, heads, E] in memory,
// so that transpose(1, 2) is contiguous; its gradient is not differentiable again. Wider heads,
// where LibTorch's kernels were as fast or faster, and everything else take LibTorch's.
WICK_EXPORT at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& v, double dropout_p = 0.0,
                                                    bool is_causal = false);

}  // namespace wick

WICK_PUBLIC_END
