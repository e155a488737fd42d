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

std::vector<MemoryEstimate> estimate_memory(const torch::nn::Module& model,
                                            const std::vector<OptimizerOptions>& optimizers,
                                            int ranks, bool bf16) {
  auto bytes_of = [bf16](const at::Tensor& t) {
    return t.numel() *
           (bf16 && t.is_floating_point() ? 2 : static_cast<std::int64_t>(t.element_size()));
  };
  std::int64_t params = 0;
  // The trainable parameters as ddp orders them (last layer first): their elements, gradient
  // bytes and optimizer-state bytes.
  std::vector<std::int64_t> numels, grads, states;
  for (const auto& np : model.named_parameters()) {
    const auto& p = np.value();
    params += bytes_of(p);
    if (!p.requires_grad()) continue;
    // The optimizer over this parameter: the one of its top-level module, else the single one.
    const OptimizerOptions* mine = nullptr;
    for (const auto& o : optimizers)
      if (o.module.empty() || np.key().rfind(o.module + ".", 0) == 0) mine = &o;
    numels.push_back(p.numel());
    grads.push_back(bytes_of(p));
    states.push_back(bytes_of(p) * (mine ? state_tensors(*mine) : 2));
  }
  for (const auto& b : model.buffers()) params += bytes_of(b);
  std::reverse(numels.begin(), numels.end());
  std::reverse(grads.begin(), grads.end());
  std::reverse(states.begin(), states.end());
  const int n = std::max(1, ranks);
  // Sharded: the rank with the largest share. ddp's split (plugins/ddp/zero.hpp): the
  // parameters end to end, rank r owning elements [r * total / n, (r + 1) * total / n); a
  // parameter a cut crosses is split between its owners and its gradient stays on every rank.
  std::int64_t total = 0;
  for (auto e : numels) total += e;
  std::vector<std::int64_t> grad_share(static_cast<std::size_t>(n)), state_share(grad_share);
  std::int64_t all_grads = 0, all_states = 0, at = 0;
  for (std::size_t i = 0; i < numels.size(); ++i) {
    const std::int64_t begin = at, end = at + numels[i];
    at = end;
    all_grads += grads[i];
    all_states += states[i];
    std::vector<int> owners;
    for (int r = 0; r < n; ++r) {
      const std::int64_t lo = std::max(begin, total * r / n),
                         hi = std::min(end, total * (r + 1) / n);
      if (hi <= lo) continue;
      owners.push_back(r);
      state_share[static_cast<std::size_t>(r)] += states[i] * (hi - lo) / numels[i];
    }
    for (int r = 0; r < n; ++r)  // ZeRO-2: on its owner alone, unless split
      if (owners.size() != 1 || owners[0] == r) grad_share[static_cast<std::size_t>(r)] += grads[i];
  }
  const auto most = [](const std::vector<std::int64_t>& v) {
    return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
  };
  return {{"1 process", params, all_grads, all_states},
          {"ddp", params, all_grads, all_states},
          {"ddp, shard_optimizer (ZeRO-1)", params, all_grads, most(state_share)},
          {"ddp, shard_optimizer + shard_gradients (ZeRO-2)", params, most(grad_share),
           most(state_share)}};
}

std::string memory_estimate_markdown(const torch::nn::Module& model,
                                     const std::vector<OptimizerOptions>& optimizers, int ranks) {
  std::string out;
  for (bool bf16 : {false, true}) {
    out += bf16 ? "\nWith bf16 weights (a model whose task builds it in bf16):\n"
                : "\nMemory per rank at " + std::to_string(ranks) +
                      " ranks (parameters and buffers, gradients, optimizer state; activations "
                      "not included; sharded rows: the rank with the largest share, the "
                      "parameters split evenly as ddp splits them):\n";
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
