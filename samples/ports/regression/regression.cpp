// Port of pytorch/examples cpp/regression: fits a degree-4 polynomial with a Linear layer on
// batches drawn fresh each step (a stream), until the smooth L1 loss falls below 1e-3.
#include <wick/plugin.hpp>
#include <wick/task.hpp>

#include <cstdint>
#include <sstream>

namespace {

constexpr std::int64_t kDegree = 4;

// Columns [x, x^2, x^3, x^4].
torch::Tensor make_features(const torch::Tensor& x) {
  return x.unsqueeze(1).pow(torch::arange(1, kDegree + 1));
}

std::string poly_desc(const torch::Tensor& w, const torch::Tensor& b) {
  std::ostringstream s;
  s << "y =";
  for (std::int64_t i = 0; i < w.numel(); ++i) s << " " << w[i].item<float>() << " x^" << i + 1;
  s << " + " << b.item<float>();
  return s.str();
}

// A stream of (features, f(x)) batches, x ~ N(0, 1) from the batch's own generator.
struct Polynomial : wick::Dataset {
  torch::Tensor w, b;
  std::int64_t size() const override { return wick::kUnsized; }
  wick::Batch get(const at::Tensor& indices, wick::Fetch& fetch) override {
    auto x = make_features(torch::randn({indices.numel()}, fetch.generator));
    return {x, x.mm(w) + b};
  }
};

class Regression : public wick::Task {
 public:
  // Built after the run's seed is set: the target polynomial follows trainer.seed.
  explicit Regression(const wick::Params&) : data_(std::make_shared<Polynomial>()) {
    data_->w = torch::randn({kDegree, 1}) * 5;
    data_->b = torch::randn({1}) * 5;
  }

  std::shared_ptr<torch::nn::Module> model() override {
    fc_ = torch::nn::Linear(kDegree, 1);
    return fc_.ptr();
  }
  std::shared_ptr<wick::Dataset> train_data() override { return data_; }
  wick::OptimizerDefaults default_optimizer() const override { return {"sgd", 0.1}; }

  at::Tensor forward(wick::Context&, const wick::Batch& b) override { return fc_(b.input); }
  wick::Output loss(wick::Context& ctx, const at::Tensor& pred, const wick::Batch& b) override {
    auto loss = torch::smooth_l1_loss(pred, b.target);
    if (loss.item<float>() < 1e-3f)
      ctx.request_stop("loss below 1e-3; learned " + poly_desc(fc_->weight.view({-1}), fc_->bias) +
                       ", actual " + poly_desc(data_->w.view({-1}), data_->b));
    return {pred, loss, {}};
  }

 private:
  std::shared_ptr<Polynomial> data_;
  torch::nn::Linear fc_{nullptr};
};

}  // namespace

WICK_PLUGIN(Regression,
            wick::PluginDef("regression", "1.0.0", "Port of pytorch/examples cpp/regression"))
