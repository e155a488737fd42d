// What training holds per rank besides activations: parameters, gradients and optimizer
// state, for a model and its optimizers, plain and with ddp's sharding (ZeRO stages 1 and 2),
// in the model's dtypes and with bf16 weights (`wick describe`). Torch types are only
// forward-declared.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wick/options.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace torch::nn {
class Module;
}

namespace wick {

struct MemoryEstimate {
  std::string setting;  // "1 process", "ddp", "ddp, shard_optimizer", ...
  std::int64_t parameters = 0, gradients = 0, optimizer_state = 0;  // bytes per rank
  std::int64_t total() const { return parameters + gradients + optimizer_state; }
};

// Rows for one process and for `ranks` ranks plain, ZeRO-1 and ZeRO-2 (sharded rows: the rank
// with the largest share, the parameters split as ddp splits them); `bf16` counts
// every floating-point parameter at 2 bytes (LibTorch's optimizers keep state in the
// parameter's dtype). `optimizers` empty: Adam over the whole model (the default).
std::vector<MemoryEstimate> estimate_memory(const torch::nn::Module& model,
                                            const std::vector<OptimizerOptions>& optimizers,
                                            int ranks, bool bf16);
// The Markdown tables of both (the model's dtypes, bf16), with what they leave out.
std::string memory_estimate_markdown(const torch::nn::Module& model,
                                     const std::vector<OptimizerOptions>& optimizers, int ranks);

}  // namespace wick

WICK_PUBLIC_END
