#include "wick/memory_estimate.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace wick {

namespace {

// Tensors of optimizer state per trainable parameter.
int state_tensors(const OptimizerOptions& o) {
  if (o.kind == OptimizerKind::sgd) return o.momentum > 0 ? 1 : 0;
  return o.amsgrad ? 3 : 2;  // adam, adamw: two moments (and the max of the second)
}

std::string mib(std::int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return b;
}

}  // namespace

std::vector<MemoryRow> estimate_memory(const torch::nn::Module& model,
                                       const std::vector<OptimizerOptions>& optimizers, int ranks,
                                       bool bf16,
                                       const std::vector<const DataParallelStrategy*>& strategies) {
  auto bytes_of = [bf16](const at::Tensor& t) {
    return t.numel() *
           (bf16 && t.is_floating_point() ? 2 : static_cast<std::int64_t>(t.element_size()));
  };
  std::vector<ParamBytes> trainable;
  std::int64_t other = 0;
  for (const auto& np : model.named_parameters()) {
    const auto& p = np.value();
    if (!p.requires_grad()) {
      other += bytes_of(p);
      continue;
    }
    // The optimizer over this parameter: the one of its top-level module, else the single one.
    const OptimizerOptions* mine = nullptr;
    for (const auto& o : optimizers)
      if (o.module.empty() || np.key().rfind(o.module + ".", 0) == 0) mine = &o;
    trainable.push_back({p.numel(), bytes_of(p), bytes_of(p) * (mine ? state_tensors(*mine) : 2)});
  }
  for (const auto& b : model.buffers()) other += bytes_of(b);
  MemoryRow one{"1 process", other, 0, 0};
  for (const auto& p : trainable) {
    one.parameters += p.bytes;
    one.gradients += p.bytes;
    one.optimizer_state += p.state_bytes;
  }
  std::vector<MemoryRow> rows{one};
  for (const auto* s : strategies)
    for (auto& r : s->memory_rows(trainable, other, std::max(1, ranks))) rows.push_back(r);
  return rows;
}

std::string memory_estimate_markdown(const torch::nn::Module& model,
                                     const std::vector<OptimizerOptions>& optimizers, int ranks,
                                     const std::vector<const DataParallelStrategy*>& strategies) {
  std::string out;
  for (bool bf16 : {false, true}) {
    out += bf16 ? "\nWith bf16 weights (a model whose task builds it in bf16):\n"
                : "\nMemory per rank at " + std::to_string(ranks) +
                      " ranks (parameters and buffers, gradients, optimizer state; activations "
                      "not included; sharded rows: the rank with the largest share, the "
                      "parameters split as each strategy splits them):\n";
    out +=
        "| Setting | Parameters | Gradients | Optimizer state | Total |\n"
        "| --- | --- | --- | --- | --- |\n";
    for (const auto& e : estimate_memory(model, optimizers, ranks, bf16, strategies))
      out += "| " + e.setting + " | " + mib(e.parameters) + " | " + mib(e.gradients) + " | " +
             mib(e.optimizer_state) + " | " + mib(e.total()) + " |\n";
  }
  out +=
      "mixed_precision (autocast, bf16 or fp16) keeps parameters, gradients and optimizer state "
      "in float32: the first table holds; it shrinks activations (on a GPU in bf16, fused "
      "Adam adds a bf16 copy of each weight wick::linear or gelu_mlp reads: 2 bytes an "
      "element). ddp adds flat gradient "
      "buckets the size of all gradients; with shard_gradients each rank keeps its share of "
      "the gradients between steps, while backward still makes them all.\n";
  return out;
}

}  // namespace wick
