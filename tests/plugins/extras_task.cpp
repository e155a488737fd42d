// Test-only task: a loss that needs more of forward than the prediction (SDK 2.9 extras). The
// classifier's hidden activation goes to loss through Context::set_extra, where a penalty on
// it joins the cross-entropy: with `extras = false` loss recomputes the activation instead,
// the reference the tests compare against (plainly and across data-parallel ranks).
#include <cstdint>

#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace {

class ExtrasTask : public wick::Task {
 public:
  explicit ExtrasTask(const wick::Params& p) : extras_(p.get_bool("extras")) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    auto x = torch::randn({512 + 64, 12}, gen);
    auto y = x.slice(1, 0, 5).argmax(1);
    train_ = std::make_shared<wick::TensorDataset>(x.slice(0, 0, 512), y.slice(0, 0, 512));
    valid_ = std::make_shared<wick::TensorDataset>(x.slice(0, 512), y.slice(0, 512));
  }
  std::shared_ptr<torch::nn::Module> model() override {
    auto root = std::make_shared<torch::nn::Module>();
    hidden_ = root->register_module("hidden", torch::nn::Linear(12, 16));
    out_ = root->register_module("out", torch::nn::Linear(16, 5));
    return root;
  }
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return valid_; }
  at::Tensor forward(wick::Context& ctx, const wick::Batch& b) override {
    auto h = torch::tanh(hidden_->forward(b.input));
    if (extras_) ctx.set_extra("hidden", h);
    return out_->forward(h);
  }
  wick::Output loss(wick::Context& ctx, const at::Tensor& pred, const wick::Batch& b) override {
    const auto h = extras_ ? ctx.extra("hidden") : torch::tanh(hidden_->forward(b.input));
    wick::Output o;
    o.loss = torch::nn::functional::cross_entropy(pred, b.target) + 0.1 * h.pow(2).mean();
    return o;
  }

 private:
  bool extras_;
  std::shared_ptr<wick::TensorDataset> train_, valid_;
  torch::nn::Linear hidden_{nullptr}, out_{nullptr};
};

}  // namespace

WICK_PLUGIN(ExtrasTask,
            wick::PluginDef("extras_task", "1.0.0", "Test: a loss that reads forward's extras")
                .param_bool("extras", true, "hand the activation through Context extras"))
