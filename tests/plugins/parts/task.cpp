#include "parts.hpp"

#include <cstdint>

namespace parts {

PartsTask::PartsTask(const wick::Params& p)
    : jit_path_(p.get_string("jit").empty() ? "" : p.get_path("jit")),
      jit_mode_(p.get_string("jit_mode")),
      share_(p.get_bool("share")) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto make = [&](std::int64_t n) {
    auto x = torch::randn({n, 4}, gen);
    auto y = x.sum(1, /*keepdim=*/true).tanh();
    return std::make_shared<wick::TensorDataset>(x, y);
  };
  train_ = make(p.get_int("samples"));
  valid_ = make(32);
}

PartsTask::~PartsTask() = default;

std::shared_ptr<torch::nn::Module> PartsTask::model() {
  net_ = std::make_shared<Net>();
  if (!jit_path_.empty())
    net_->enc = net_->register_module(
        "enc", wick::JitModule(wick::JitModuleImpl::load(jit_path_), jit_mode_ == "trainable"
                                                                         ? wick::JitMode::trainable
                                                                         : wick::JitMode::frozen));
  net_->head = net_->register_module("head", torch::nn::Linear(4, 1));
  net_->extra = net_->register_module("extra", wick::TensorModule());
  net_->extra->add("shift", torch::zeros({1}));
  // Test only: the part's weight registered again elsewhere, which the trainer refuses.
  if (share_ && net_->enc)
    net_->head->register_parameter(
        "stolen", net_->enc->jit().attr("fc").toModule().attr("weight").toTensor());
  return net_;
}

at::Tensor PartsTask::forward(wick::Context&, const wick::Batch& b) {
  ++forwards_;
  auto x = net_->enc ? net_->enc->forward(b.input) : b.input;
  return net_->head->forward(x) + (*net_->extra)["shift"];
}

wick::Output PartsTask::loss(wick::Context&, const at::Tensor& pred, const wick::Batch& b) {
  wick::Output o;
  o.loss = torch::mse_loss(pred, b.target);
  return o;
}

double PartsTask::jit_sum() const {
  double s = 0;
  for (const auto& t : net_->enc->jit().named_parameters()) s += t.value.sum().item<double>();
  return s;
}

}  // namespace parts
