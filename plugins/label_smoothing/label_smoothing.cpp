// Label smoothing for classification: the training loss against targets that put 1 - eps on
// the true class and eps spread evenly over all C classes. For cross-entropy over logits z
// that loss is (1 - eps) * CE + eps * mean_k(-log_softmax(z)_k), so the task's own loss is
// kept and the uniform term added at after_loss. Because the uniform term does not depend on
// the target, it composes with mixup and cutmix (which mix the task's loss over two targets):
// give them a lower order so that they run first. Validation loss is left as the task's.
#include <cmath>
#include <string>

#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace {

class LabelSmoothing : public wick::Hook {
 public:
  explicit LabelSmoothing(const wick::Params& p) : eps_(p.get_float("epsilon")) {
    if (!(eps_ >= 0 && eps_ < 1)) throw p.error("epsilon", "must be in [0, 1), e.g. 0.1");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::after_loss, [this](wick::Context& c) {
      if (!c.state().training() || eps_ == 0) return;
      auto& out = c.output();
      const auto& z = out.pred;
      // One score a sample (a binary classifier trained with BCE) has no classes to spread
      // over: the uniform term would be 0 and the loss only scaled.
      if (z.dim() != 2 || !z.is_floating_point() || z.size(1) < 2)
        throw std::runtime_error(
            "label_smoothing needs class scores [N, C], C >= 2 (logits of a classifier trained "
            "with cross-entropy); this task predicts a tensor of " +
            shape_of(z) + (z.is_floating_point() ? "" : " that is not floating point") +
            (z.dim() == 2 && z.size(1) == 1
                 ? "; for one score a sample (BCE), smooth the targets in the task instead"
                 : ""));
      // Float32 at least (a bf16 model's scores), float64 for a float64 model.
      const auto type = at::promote_types(z.scalar_type(), torch::kFloat);
      const auto uniform = -torch::log_softmax(z.to(type), 1).mean(1).mean();
      out.loss = (1 - eps_) * out.loss + eps_ * uniform;
    });
  }

 private:
  static std::string shape_of(const at::Tensor& t) {
    std::string s = "[";
    for (auto d : t.sizes()) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
    return s + "]";
  }

  double eps_;
};

}  // namespace

WICK_PLUGIN(LabelSmoothing,
            wick::PluginDef("label_smoothing", "1.0.0",
                            "Label smoothing of a cross-entropy training loss")
                .order(-3)
                .param_float("epsilon", 0.1,
                             "probability mass spread evenly over the classes (0: off)"))
