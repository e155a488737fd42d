#include "wick/memory_estimate.hpp"

#include <torch/torch.h>

#include <cstdio>

namespace wick {

namespace {

// Tensors of optimizer state per trainable parameter.
int state_tensors(const OptimizerOptions& o) {
  if (o.name == "sgd") return o.momentum > 0 ? 1 : 0;
  return o.amsgrad ? 3 : 2;  // adam, adamw: two moments (and the max of the second)
}

std::string mib(std::int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return b;
}

}  // namespace

std::vector<MemoryEstimate> estimate_memory(const torch::nn::Module& model,
                                            const std::vector<OptimizerOptions>& optimizers,
                                            int ranks, bool bf16) {
  std::int64_t params = 0, trainable = 0, state = 0;
  for (const auto& np : model.named_parameters()) {
    const auto& p = np.value();
    const std::int64_t size =
        bf16 && p.is_floating_point() ? 2 : static_cast<std::int64_t>(p.element_size());
    const std::int64_t bytes = p.numel() * size;
    params += bytes;
    if (!p.requires_grad()) continue;
    trainable += bytes;
    // The optimizer over this parameter: the one of its top-level module, else the single one.
    const OptimizerOptions* mine = nullptr;
    for (const auto& o : optimizers)
      if (o.module.empty() || np.key().rfind(o.module + ".", 0) == 0) mine = &o;
    state += bytes * (mine ? state_tensors(*mine) : 2);
  }
  for (const auto& b : model.buffers())
    params += b.numel() * (bf16 && b.is_floating_point() ? 2 : b.element_size());
  const std::int64_t n = std::max(1, ranks);
  // Sharded: this rank's share of the state (and, stage 2, of the gradients kept between
  // steps), rounded up.
  auto share = [n](std::int64_t v) { return (v + n - 1) / n; };
  return {
      {"1 process", params, trainable, state},
      {"ddp", params, trainable, state},
      {"ddp, shard_optimizer (ZeRO-1)", params, trainable, share(state)},
      {"ddp, shard_optimizer + shard_gradients (ZeRO-2)", params, share(trainable), share(state)}};
}

std::string memory_estimate_markdown(const torch::nn::Module& model,
                                     const std::vector<OptimizerOptions>& optimizers, int ranks) {
  std::string out;
  for (bool bf16 : {false, true}) {
    out += bf16 ? "\nWith bf16 weights (a model whose task builds it in bf16):\n"
                : "\nMemory per rank at " + std::to_string(ranks) +
                      " ranks (parameters and buffers, gradients, optimizer state; activations "
                      "not included):\n";
    out +=
        "| Setting | Parameters | Gradients | Optimizer state | Total |\n"
        "| --- | --- | --- | --- | --- |\n";
    for (const auto& e : estimate_memory(model, optimizers, ranks, bf16))
      out += "| " + e.setting + " | " + mib(e.parameters) + " | " + mib(e.gradients) + " | " +
             mib(e.optimizer_state) + " | " + mib(e.total()) + " |\n";
  }
  out +=
      "mixed_precision (autocast, bf16 or fp16) keeps parameters, gradients and optimizer state "
      "in float32: the first table holds; it shrinks activations. ddp adds flat gradient "
      "buckets the size of all gradients; with shard_gradients each rank keeps its share of "
      "the gradients between steps, while backward still makes them all.\n";
  return out;
}

}  // namespace wick
