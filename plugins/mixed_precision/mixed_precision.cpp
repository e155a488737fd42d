// Mixed precision. bf16: autocast around the forward pass (a forward-stage handler; the
// prediction leaves it as float32, so the task's loss is computed in full precision, unless
// float_prediction = false: then a large prediction, a language model's logits, is not copied,
// and the task's loss computes in float itself, e.g. log_softmax(..., float)), on the CPU
// or CUDA (wick/autocast.hpp), no loss scaling.
// fp16: autocast on CUDA plus dynamic loss scaling: the backward loss is multiplied by the
// scale; in optimizer_step the gradients are unscaled and checked, a step with an inf or
// NaN is skipped and the scale backed off, and it grows after growth_interval good steps.
// fp16 autocast is for CUDA (LibTorch 1.13 has no fp16 matmul on the CPU), so on the CPU fp16
// runs the loss scaling alone.
// auto (the default): bf16 where the device runs it natively (AVX512-BF16 or AMX on the CPU,
// compute capability 8.0+ on CUDA), else fp32 (no autocast): emulated bf16 is slower than fp32.
#include <cstdio>
#include <optional>
#include <string>

#include <wick/autocast.hpp>
#include <wick/hardware.hpp>
#include <wick/task.hpp>
#include <wick/wick.hpp>

#include "loss_scaler.hpp"

namespace {

class MixedPrecision : public wick::Hook {
 public:
  explicit MixedPrecision(const wick::Params& p)
      : scaler_(p.get_float("init_scale"), p.get_float("growth_factor"),
                p.get_float("backoff_factor"), p.get_int("growth_interval")),
        float_prediction_(p.get_bool("float_prediction")) {
    const auto dtype = p.get_string("dtype");
    fp16_ = dtype == "fp16" || dtype == "float16";
    auto_ = dtype == "auto";
    if (!(p.get_float("init_scale") > 0)) throw p.error("init_scale", "must be > 0");
    if (!(p.get_float("growth_factor") > 1)) throw p.error("growth_factor", "must be > 1");
    const double b = p.get_float("backoff_factor");
    if (!(b > 0 && b < 1)) throw p.error("backoff_factor", "must be in (0, 1)");
    if (p.get_int("growth_interval") < 1) throw p.error("growth_interval", "must be >= 1");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) { set_up(c); });
    r.stage(wick::Stage::forward, [this](wick::Context& c, wick::Next next) {
      set_up(c);  // evaluate and predict run no before_fit
      std::optional<wick::AutocastScope> autocast;
      if (!fp32_ && (cuda_ || !fp16_))
        autocast.emplace(cuda_ ? c10::DeviceType::CUDA : c10::DeviceType::CPU,
                         fp16_ ? at::kHalf : at::kBFloat16);
      const bool r = next();
      auto& pred = c.output().pred;
      if (float_prediction_ && pred.defined() &&
          (pred.scalar_type() == at::kBFloat16 || pred.scalar_type() == at::kHalf))
        pred = pred.to(at::kFloat);
      return r;
    });
    if (!fp16_) return;

    r.stage(wick::Stage::backward, [this](wick::Context& c, wick::Next next) {
      c.backward_loss() = scaler_.scale_loss(c.backward_loss());
      return next();
    });
    r.stage(wick::Stage::optimizer_step, [this](wick::Context& c, wick::Next next) {
      std::vector<at::Tensor> grads;
      for (const auto& group : c.optimizer().param_groups())
        for (const auto& p : group.params())
          if (p.grad().defined()) grads.push_back(p.grad());
      // One sync per real step: whether to step must be known here.
      bool found_inf = scaler_.unscale_(grads).item<bool>();
      if (c.sharded_state()) {
        // Each rank checked its share of the gradients: every rank must skip alike.
        auto any = torch::full({1}, found_inf ? 1.0 : 0.0, torch::kDouble);
        c.collectives()->all_reduce_sum(any);
        found_inf = any.item<double>() > 0;
      }
      bool stepped = false;
      if (found_inf)
        c.count_skipped_step();
      else
        stepped = next();
      scaler_.update(found_inf);
      c.log("loss_scale", scaler_.scale());
      return stepped;
    });
    r.needs(wick::Stage::optimizer_step, wick::Capability::accumulated_gradients,
            "gradients must be unscaled once per real step, after accumulation");
    r.needs(wick::Stage::optimizer_step, wick::Capability::reduced_gradients,
            "every process must see the same non-finite check, on the all-reduced gradient");
    r.provides(wick::Stage::optimizer_step, wick::Capability::unscaled_gradients);
  }

  bool has_state() const override { return fp16_; }
  void save_state(wick::StateDict& out) const override {
    out.set_float("scale", scaler_.scale());
    out.set_int("growth_tracker", scaler_.growth_tracker());
  }
  void load_state(const wick::StateDict& in) override {
    scaler_.restore(in.get_float("scale"), in.get_int("growth_tracker"));
  }

 private:
  // The device, and with dtype = "auto" the choice, known once per run.
  void set_up(wick::Context& c) {
    if (set_up_) return;
    set_up_ = true;
    cuda_ = c.run().device.is_cuda();
    if (auto_) {
      fp32_ = !wick::native_bf16(c.run().device);
      if (c.run().is_main_process()) std::fprintf(stderr, "%s\n", auto_choice(c).c_str());
    }
    if (fp16_ && !cuda_)
      std::fprintf(stderr,
                   "wick: mixed_precision: fp16 autocast is for CUDA; on the CPU the forward "
                   "runs in fp32, with loss scaling only. Use dtype = \"bf16\" for reduced "
                   "precision on CPU.\n");
  }

  static std::string auto_choice(wick::Context& c) {
    const auto& d = c.run().device;
    const std::string where = d.is_cuda() ? "this GPU" : "this CPU";
    if (wick::native_bf16(d))
      return "mixed_precision: dtype = \"auto\": bf16 (" + where +
             (d.is_cuda() ? " runs bf16 natively)"
                          : std::string(" has ") +
                                (wick::cpu_features().amx_bf16 ? "AMX-BF16)" : "AVX512-BF16)"));
    const auto& hidden = wick::cpu_features().hidden;
    return "mixed_precision: dtype = \"auto\": fp32, no autocast (" + where +
           " has no native bf16" + (d.is_cuda() ? "" : ": no AVX512-BF16 or AMX-BF16") +
           (d.is_cuda() || hidden.empty() ? "" : " as WICK_CPU_DISABLE=" + hidden + " hides them") +
           ", and emulated bf16 is slower than fp32)";
  }

  wick::amp::LossScaler scaler_;
  bool fp16_ = false, cuda_ = false, set_up_ = false;
  bool auto_ = false, fp32_ = false;  // dtype = "auto" and its choice
  bool float_prediction_ = true;
};

}  // namespace

WICK_PLUGIN(MixedPrecision,
            wick::PluginDef("mixed_precision", "2.1.0",
                            "bf16/fp16 autocast around the forward pass (bf16 where native with "
                            "\"auto\"); fp16 loss scaling")
                .one_instance()
                .order(-5)
                .param_choice("dtype", {"auto", "bf16", "fp16", "bfloat16", "float16"}, "auto",
                              "auto: bf16 where the CPU (AVX512-BF16, AMX) or GPU runs it "
                              "natively, else fp32; bf16: autocast, CPU or CUDA; fp16: autocast "
                              "on CUDA + dynamic loss scaling")
                .param_bool("float_prediction", true,
                            "the prediction leaves the forward as float32 (false: as autocast "
                            "made it, bf16/fp16, for a task whose loss computes in float itself; "
                            "saves a float copy of a large output such as a language model's "
                            "logits)")
                .param_float("init_scale", 65536.0, "fp16: initial loss scale")
                .param_float("growth_factor", 2.0,
                             "fp16: scale multiplier after growth_interval "
                             "finite steps")
                .param_float("backoff_factor", 0.5, "fp16: scale multiplier on an inf/NaN step")
                .param_int("growth_interval", 2000,
                           "fp16: finite optimizer steps in a row before the scale grows"))
