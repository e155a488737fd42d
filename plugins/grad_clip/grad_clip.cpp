// Gradient clipping, once per real optimizer step: by total norm (max_norm, norm_type) or
// by value. Its optimizer_step handler must come after grad_accum (so micro-batches that do
// not step are never clipped) and after mixed_precision (so it clips unscaled gradients);
// both are checked at start. The pre-clip total norm is logged as "grad_norm" (as a
// tensor: no device sync per step). With optimizer state sharded over ranks (ddp's
// shard_optimizer), each rank's optimizer holds its share of the parameters: the total norm
// combines every rank's part with one small all-reduce per step (and a device sync).
#include <cmath>

#include <wick/context.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>
#include <wick/torch_compat.hpp>  // TORCH_VERSION_MAJOR

namespace {

// LibTorch 2.4+: each gradient's norm, and the scaling, as a few multi-tensor kernels on CUDA
// rather than two operations per parameter (a GPT-2's 148 tensors: ~450 launches a step).
#define WICK_FOREACH_CLIP \
  (TORCH_VERSION_MAJOR >= 2 && TORCH_VERSION_MINOR >= 4 || TORCH_VERSION_MAJOR >= 3)

class GradClip : public wick::Hook {
 public:
  explicit GradClip(const wick::Params& p)
      : max_norm_(p.get_float("max_norm")),
        norm_type_(p.get_float("norm_type")),
        value_(p.get_float("value")) {
    if (max_norm_ < 0) throw p.error("max_norm", "must be > 0 (or 0 to clip by value only)");
    if (value_ < 0) throw p.error("value", "must be > 0 (or 0 to clip by norm only)");
    if (max_norm_ == 0 && value_ == 0)
      throw p.error("max_norm", "set max_norm (clip the total norm) or value (clip each element)");
    if (!(norm_type_ > 0)) throw p.error("norm_type", "must be > 0 (2.0 for L2, inf for max)");
  }

  void connect(wick::Registrar& r) override {
    r.stage(wick::Stage::optimizer_step, [this](wick::Context& c, wick::Next next) {
      clip(c);
      return next();
    });
    r.needs(wick::Stage::optimizer_step, wick::Capability::accumulated_gradients,
            "clipping must only see the full accumulated gradient of a real step");
    r.needs(wick::Stage::optimizer_step, wick::Capability::unscaled_gradients,
            "gradients must be unscaled before they are clipped");
    r.needs(wick::Stage::optimizer_step, wick::Capability::reduced_gradients,
            "every process must clip the same, all-reduced gradient");
  }

 private:
  void clip(wick::Context& c) {
    std::vector<at::Tensor> grads;
    for (const auto& group : c.optimizer().param_groups())
      for (const auto& p : group.params())
        if (p.grad().defined()) grads.push_back(p.grad());
    // A rank with no share of gradients still takes part in the norm's all-reduce.
    if (grads.empty() && !c.sharded_state()) return;
    torch::NoGradGuard no_grad;
    const at::Tensor before = total_norm(c, grads);
    c.log("grad_norm", before);
    if (value_ > 0)
      for (auto& g : grads) g.clamp_(-value_, value_);
    if (max_norm_ > 0) {
      const at::Tensor norm = value_ > 0 ? total_norm(c, grads) : before;
      // Scale by min(1, max_norm / (norm + eps)): no branch, so no sync.
      auto coef = (max_norm_ / (norm + 1e-6)).clamp_max(1.0);
#if WICK_FOREACH_CLIP
      if (!grads.empty()) at::_foreach_mul_(grads, coef);
#else
      for (auto& g : grads) g.mul_(coef.to(g.scalar_type()));
#endif
    }
  }

  // Total norm over all gradients, kept on the device (but with sharded optimizer state).
  at::Tensor total_norm(wick::Context& c, const std::vector<at::Tensor>& grads) const {
    const bool inf = std::isinf(norm_type_);
    // Float32 at least (bf16 and fp16 gradients), float64 for a float64 model.
    at::ScalarType type = at::kFloat;
    for (const auto& g : grads) type = at::promote_types(type, g.scalar_type());
#if WICK_FOREACH_CLIP
    const std::vector<at::Tensor> parts =
        grads.empty() ? std::vector<at::Tensor>{} : at::_foreach_norm(grads, norm_type_, type);
#else
    std::vector<at::Tensor> parts;
    for (const auto& g : grads)
      parts.push_back(inf ? g.abs().max().to(type) : g.norm(norm_type_).to(type));
#endif
    const at::Tensor local = parts.empty() ? torch::zeros({}, type)
                             : inf         ? torch::stack(parts).max()
                                           : torch::stack(parts).norm(norm_type_);
    if (!c.sharded_state()) return local;
    // Each rank's part in its own slot of a sum: the sum of p-th powers, or (inf) the max.
    const double mine = local.item<double>();
    auto slots = torch::zeros({c.state().num_processes}, torch::kDouble);
    slots[c.state().rank] = inf ? mine : std::pow(mine, norm_type_);
    c.collectives()->all_reduce_sum(slots);
    const double total =
        inf ? slots.max().item<double>() : std::pow(slots.sum().item<double>(), 1.0 / norm_type_);
    return torch::tensor(total, torch::kDouble)
        .to(grads.empty() ? local.device() : grads.front().device(), type);
  }

  double max_norm_, norm_type_, value_;
};

}  // namespace

WICK_PLUGIN(GradClip,
            wick::PluginDef("grad_clip", "1.1.0",
                            "Clips gradients by total norm or by value once per optimizer step")
                .order(0)
                .param_float("max_norm", 0.0,
                             "clip the total gradient norm to this (0: do not clip by norm)")
                .param_float_inf("norm_type", 2.0, "order of the norm (2.0: L2, inf: max-abs)")
                .param_float("value", 0.0,
                             "clamp each gradient element to [-value, value] (0: off); "
                             "applied before the norm clip when both are set"))
