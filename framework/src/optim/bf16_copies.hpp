// Private: bf16 copies of float parameters, written by fused Adam's CUDA kernel as it updates
// them, for the bf16 products of wick::linear and gelu_mlp. Without them each product casts
// its float weight to bf16 on every forward: a pass of its own per parameter a step (GPT-2
// 124M under bf16 autocast on an H100, run 4 of bench/results-gpu.md: 146 casts, 1.69 ms of a
// 41.4 ms step), where the kernel, which holds the updated value in a register, writes two
// bytes more. A copy is that cast exactly (round to nearest even), so training is the same
// bit for bit. Torch's tensors only: no CUDA here.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for the white-box tests (tests/), which link libwick; not an installed header.
WICK_PUBLIC_BEGIN

namespace wick::bf16_copies {

// `p` in bf16 for a product: its copy where the last write of it was fused Adam's (the copy's
// record: p's storage, size and version counter unchanged since, which any in-place operation
// of LibTorch's moves on: a restore, SAM's perturbation, an EMA swap), else p.to(bf16), and
// fused Adam's later steps are asked to write a copy. A bf16 p is itself; p must be a float32
// parameter (a leaf) for a copy, else it is cast.
at::Tensor of(const at::Tensor& p);

// For fused Adam's kernel: the copy to write of p this step (contiguous bf16 of p's shape, kept
// across steps so that a CUDA graph's replays write the one it captured), or undefined where
// none was asked for.
at::Tensor to_write(const at::Tensor& p);
// After the kernel is queued: the copy from to_write(p) holds p rounded (its version counter is
// moved on, so that a graph which saved it before, and would now read the new values, fails
// in backward as for p itself).
void written(const at::Tensor& p);

// How many products `of` served from a copy in this process: the tests' seam.
std::int64_t served();

}  // namespace wick::bf16_copies

WICK_PUBLIC_END
