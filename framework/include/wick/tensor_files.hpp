// Tensors in the files users make with NumPy, pandas and PyTorch: what `wick predict` reads
// (--input) and writes (--output). Host programs and task plugins may use them too.
#pragma once

#include <string>

namespace at {
class Tensor;
}

namespace wick {

// One tensor [N, ...] from FILE, by its extension:
//   .npy  NumPy's format, C order; bool, integer and floating dtypes (float64 stays float64)
//   .csv  a header row, then one row of numeric cells per sample: [N, columns] float32
//   .pt   torch.save of a tensor, or of a dict holding one under `key`
// Throws ConfigError naming the file, what is wrong and the fix.
at::Tensor read_tensor_file(const std::string& path, const std::string& key = "input");

// Writes t ([N, ...], any device) atomically as .npy (float32: shape [N, ...]) or .csv (a
// header row "sample,0,1,...", then per sample its index and its values flattened, %.9g).
// Throws ConfigError for another extension, std::runtime_error when writing fails.
void write_tensor_file(const std::string& path, const at::Tensor& t);

}  // namespace wick
