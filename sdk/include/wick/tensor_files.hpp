// Tensors in the files users make with NumPy, pandas and PyTorch: what `wick predict` reads
// (--input) and writes (--output), and the torchscript task's data. Host programs and task
// plugins may use them too.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// One tensor [N, ...] from FILE, by its extension:
//   .npy  NumPy's format, C order; bool, integer and floating dtypes (float64 stays float64);
//         memory-mapped read-only, so rows are read from disk as they are used (the tensor
//         must not be written into: copy it first)
//   .npz  numpy.savez / savez_compressed: the array named `key`
//   .csv  a header row, then one row of numeric cells per sample: [N, columns] float32
//   .pt   torch.save of a tensor, of a dict holding one under `key`, or of a tuple (its first)
// Throws ConfigError naming the file, what is wrong and the fix.
WICK_EXPORT at::Tensor read_tensor_file(const std::string& path, const std::string& key = "input");

// A data set's inputs and targets, a row per sample each.
struct TensorPair {
  at::Tensor input, target;
};
// From FILE: .pt (a dict, by key; a tuple or list: its first two), .npz (by key), a folder of
// KEY.npy files (memory-mapped), or .csv (the column named `target_key` is the target, the
// others the input). Throws ConfigError naming the file and what it holds (the keys or
// columns present, FILE:LINE:COL of a cell that is not a number).
WICK_EXPORT TensorPair read_data_file(const std::string& path, const std::string& input_key,
                                      const std::string& target_key);

// Writes t ([N, ...], any device) atomically as .npy (float32: shape [N, ...]) or .csv (a
// header row "sample,0,1,...", then per sample its index and its values flattened, %.9g).
// Throws ConfigError for another extension, std::runtime_error when writing fails.
WICK_EXPORT void write_tensor_file(const std::string& path, const at::Tensor& t);

}  // namespace wick

WICK_PUBLIC_END
