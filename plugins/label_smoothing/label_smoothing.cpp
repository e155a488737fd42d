// Label smoothing for classification: the training loss against targets that put 1 - eps on
// the true class and eps spread evenly over all C classes. For cross-entropy over logits z
// that loss is (1 - eps) * CE + eps * mean_k(-log_softmax(z)_k), so the task's own loss is
// kept and the uniform term added at after_loss. Because the uniform term does not depend on
// the target, it composes with mixup and cutmix (which mix the task's loss over two targets):
// give them a lower order so that they run first. Validation loss is left as the task's.
#include <cmath>

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
      if (z.dim() != 2 || !z.is_floating_point())
        throw std::runtime_error(
            "label_smoothing needs class scores [N, C] (logits of a classifier trained with "
            "cross-entropy); this task predicts a tensor of " +
            std::to_string(z.dim()) + " dimension(s)" +
            (z.is_floating_point() ? "" : " that is not floating point"));
      const auto uniform = -torch::log_softmax(z.to(torch::kFloat), 1).mean(1).mean();
      out.loss = (1 - eps_) * out.loss + eps_ * uniform;
    });
  }

 private:
  double eps_;
};

}  // namespace

WICK_PLUGIN(LabelSmoothing,
            wick::PluginDef("label_smoothing", "1.0.0",
                            "Label smoothing of a cross-entropy training loss")
                .order(-3)
                .param_float("epsilon", 0.1,
                             "probability mass spread evenly over the classes (0: off)"))
