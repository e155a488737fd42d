// Test plugin: a third party's weight average, built against the SDK alone as any plugin
// author would. It keeps the running mean of the parameters after each optimizer step
// (Polyak averaging), validates on the mean (swapped in at before_valid, back at after_epoch),
// keeps the mean in its checkpoint state, and offers it as the run's evaluation weights under
// its own word, "polyak": what the built-in ema hook does, through the same SDK calls.
#include <cstdint>
#include <string>
#include <vector>

#include <wick/context.hpp>
#include <wick/plugin.hpp>
#include <wick/state_dict.hpp>
#include <wick/task.hpp>

namespace {

class WeightMean : public wick::Hook {
 public:
  explicit WeightMean(const wick::Params&) {}

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::after_step, [this](wick::Context& c) {
      if (c.state().training() && c.state().stepped) add(c);
    });
    r.on(wick::Point::before_valid, [this](wick::Context& c) { swap(c, true); });
    r.on(wick::Point::after_epoch, [this](wick::Context& c) { swap(c, false); });
    r.on(wick::Point::after_cancel, [this](wick::Context& c) { swap(c, false); });
  }

  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override {
    out.set_int("count", count_);
    for (std::size_t i = 0; i < mean_.size(); ++i)
      out.set_tensor("mean." + std::to_string(i), mean_[i]);
  }
  void load_state(const wick::StateDict& in) override {
    count_ = in.get_int("count");
    mean_.clear();
    for (std::size_t i = 0; in.has("mean." + std::to_string(i)); ++i)
      mean_.push_back(in.get_tensor("mean." + std::to_string(i)));
  }
  std::string eval_weights(const torch::nn::Module& model, wick::NamedTensors& out) const override {
    if (mean_.empty()) return "";
    const auto named = model.named_parameters();
    for (std::size_t i = 0; i < mean_.size(); ++i) out.emplace_back(named[i].key(), mean_[i]);
    return "polyak";
  }

 private:
  void add(wick::Context& c) {
    torch::NoGradGuard no_grad;
    const auto ps = c.model().parameters();
    if (mean_.size() != ps.size()) {
      mean_.clear();
      for (const auto& p : ps) mean_.push_back(torch::zeros_like(p));
      count_ = 0;
    }
    ++count_;
    for (std::size_t i = 0; i < ps.size(); ++i)
      mean_[i].add_((ps[i].detach() - mean_[i]) / static_cast<double>(count_));
  }
  void swap(wick::Context& c, bool in) {
    if (in == swapped_ || mean_.empty()) return;
    torch::NoGradGuard no_grad;
    auto ps = c.model().parameters();
    if (in) backup_.clear();
    for (std::size_t i = 0; i < ps.size(); ++i) {
      if (in) backup_.push_back(ps[i].detach().clone());
      ps[i].detach().copy_(in ? mean_[i].to(ps[i].device()) : backup_[i]);
    }
    swapped_ = in;
  }

  std::vector<at::Tensor> mean_, backup_;
  std::int64_t count_ = 0;
  bool swapped_ = false;
};

}  // namespace

WICK_PLUGIN(WeightMean,
            wick::PluginDef("weight_mean", "1.0.0",
                            "Test: a third party's running mean of the weights, for evaluation")
                .order(-20))
