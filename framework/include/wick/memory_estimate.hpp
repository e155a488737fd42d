// What training holds per rank besides activations: parameters, gradients and optimizer
// state, for a model and its optimizers, in one process and as each data-parallel strategy
// shares it (its own rows: DataParallelStrategy::memory_rows), in the model's dtypes and with
// bf16 weights (`wick describe`). Torch types are only forward-declared.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wick/data_parallel.hpp"
#include "wick/options.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace torch::nn {
class Module;
}

namespace wick {

// "1 process", then each strategy's rows at `ranks` ranks; `bf16` counts every
// floating-point parameter at 2 bytes (LibTorch's optimizers keep state in the parameter's
// dtype). `optimizers` empty: Adam over the whole model (the default).
std::vector<MemoryRow> estimate_memory(const torch::nn::Module& model,
                                       const std::vector<OptimizerOptions>& optimizers, int ranks,
                                       bool bf16,
                                       const std::vector<const DataParallelStrategy*>& strategies);
// The Markdown tables of both (the model's dtypes, bf16), with what they leave out.
std::string memory_estimate_markdown(const torch::nn::Module& model,
                                     const std::vector<OptimizerOptions>& optimizers, int ranks,
                                     const std::vector<const DataParallelStrategy*>& strategies);

}  // namespace wick

WICK_PUBLIC_END
