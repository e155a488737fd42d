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
#include <vector>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for the white-box tests (tests/), which link libwick; not an installed header.
WICK_PUBLIC_BEGIN

namespace wick::bf16_copies {

// `p` in bf16 for a product: its copy where the last write of it was fused Adam's or refresh()'s
// (the copy's record: p's storage, sizes and version counter unchanged since, which any in-place
// operation of LibTorch's moves on: a restore, SAM's perturbation, an EMA swap), else
// p.to(bf16), and fused Adam's later steps are asked to write a copy. A bf16 p is itself; p
// must be a float32 parameter (a leaf) for a copy, else it is cast.
at::Tensor of(const at::Tensor& p);

// For fused Adam's kernel: the copy to write of p this step (contiguous bf16 of p's shape, kept
// across steps so that a CUDA graph which captured a product reading it reads each step's), or
// undefined where none was asked for.
at::Tensor to_write(const at::Tensor& p);
// After the kernel is queued: the copy from to_write(p) holds p rounded (its version counter is
// moved on, so that a graph which saved it before, and would now read the new values, fails
// in backward as for p itself).
void written(const at::Tensor& p);

// Before a training step's forward: each copy that no longer holds its parameter (changed in
// place since the kernel wrote it: a hook's weight constraint, a restore, an EMA swap) is cast
// again into its own storage. A replayed CUDA graph reads the copy it captured without asking
// `of`, so it must hold the parameter's values at every replay; eager steps then read the copy
// too, rather than casting the weight in each product. The entries of parameters that died are
// dropped.
void refresh();

// At a fit's end: the copies of these parameters freed (two bytes an element on the device);
// a later fit asks for them again.
void release(const std::vector<at::Tensor>& params);

// How many products `of` served from a copy in this process: the tests' seam.
std::int64_t served();

}  // namespace wick::bf16_copies

WICK_PUBLIC_END
