// Private: the element type of the rows wick's CUDA kernels read and write, named without
// LibTorch so that nvcc compiles the kernels without LibTorch's headers.
#pragma once

namespace wick::cuda {

enum class RowType { f32, bf16 };

}  // namespace wick::cuda
