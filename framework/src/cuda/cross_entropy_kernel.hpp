// Private: the CUDA kernels behind wick::cross_entropy (wick/losses.hpp), declared without
// LibTorch so that nvcc compiles cross_entropy_kernel.cu without LibTorch's headers.
#pragma once

#include <cstdint>

namespace wick::cuda {

// The logits' element type.
enum class LogitType { f32, bf16, f16 };

// Per row of `rows` x `vocab` contiguous logits: lse = log(sum(exp(x))) and loss = lse -
// x[target] (0 where target == ignore_index, NaN where it is outside [0, vocab)), in float.
// One read of the logits. Throws std::runtime_error with CUDA's message when the launch fails.
void launch_cross_entropy_forward(const void* logits, LogitType type, const std::int64_t* target,
                                  std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index,
                                  float* loss, float* lse, void* stream);

// The gradient of sum(loss) x *scale (a float on the device: the mean's 1 / count times the
// incoming gradient) with respect to the logits: (softmax(x) - onehot(target)) x scale, zero
// rows where target == ignore_index, written in the logits' type. One read, one write.
void launch_cross_entropy_backward(const void* logits, void* grad, LogitType type,
                                   const std::int64_t* target, const float* lse, const float* scale,
                                   std::int64_t rows, std::int64_t vocab, std::int64_t ignore_index,
                                   void* stream);

}  // namespace wick::cuda
