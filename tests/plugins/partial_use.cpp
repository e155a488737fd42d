// Test-only task: a linear classifier whose second head is used on one rank alone (the
// process whose RANK is `extra_rank`), so that on the other ranks two of its parameters never
// get a gradient. Data as the synthetic task's, smaller.
#include <wick/plugin.hpp>
#include <wick/task.hpp>

#include <cstdint>
#include <cstdlib>

namespace {

struct Net : torch::nn::Module {
  Net(std::int64_t in, std::int64_t hidden, std::int64_t classes)
      : trunk(register_module("trunk", torch::nn::Linear(in, hidden))),
        head(register_module("head", torch::nn::Linear(hidden, classes))),
        extra(register_module("extra", torch::nn::Linear(hidden, classes))) {}
  torch::nn::Linear trunk, head, extra;
};

class PartialUse : public wick::Task {
 public:
  explicit PartialUse(const wick::Params& p) : extra_rank_(p.get_int("extra_rank")) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    auto w = torch::randn({12, 5}, gen);
    auto x = torch::randn({256, 12}, gen);
    train_ = std::make_shared<wick::TensorDataset>(x, x.matmul(w).argmax(1));
    const char* rank = std::getenv("RANK");
    use_extra_ = (rank ? std::atoll(rank) : 0) == extra_rank_;
  }

  std::shared_ptr<torch::nn::Module> model() override {
    net_ = std::make_shared<Net>(12, 16, 5);
    return net_;
  }
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return nullptr; }

  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    auto h = torch::relu(net_->trunk(b.input));
    auto logits = net_->head(h);
    if (use_extra_) logits = logits + net_->extra(h);
    return logits;
  }
  wick::Output loss(wick::Context&, const at::Tensor& pred, const wick::Batch& b) override {
    return wick::classification_loss(pred, b.target, false);
  }

 private:
  std::int64_t extra_rank_;
  bool use_extra_ = false;
  std::shared_ptr<wick::TensorDataset> train_;
  std::shared_ptr<Net> net_;
};

}  // namespace

WICK_PLUGIN(PartialUse,
            wick::PluginDef("partial_use", "1.0.0",
                            "Test task: a second head used on one rank only")
                .param_int("extra_rank", 1, "the rank (RANK) whose forward uses the second head"))
