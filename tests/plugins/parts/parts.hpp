// A library of two plugins (WICK_PLUGINS, wicklib_parts.so): the task parts_task and the hook
// parts_probe, which reaches the task as its own class (ctx.task<parts::PartsTask>()). The
// classes are in a named namespace and declared here because the hook's translation unit
// (hook.cpp) uses the task's class, defined in task.cpp: typed access needs one class.
#pragma once

#include <cstdint>

#include <wick/jit.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>
#include <wick/tensor_module.hpp>

namespace parts {

// Linear regression of 4 features, through an optional TorchScript part (`jit`, a .pt file,
// frozen or trainable), a trainable Linear head and a bare trained tensor (a TensorModule).
struct Net : torch::nn::Module {
  wick::JitModule enc{nullptr};
  torch::nn::Linear head{nullptr};
  wick::TensorModule extra;
};

class PartsTask : public wick::Task {
 public:
  explicit PartsTask(const wick::Params& p);
  ~PartsTask() override;
  std::shared_ptr<torch::nn::Module> model() override;
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return valid_; }
  at::Tensor forward(wick::Context& ctx, const wick::Batch& b) override;
  wick::Output loss(wick::Context& ctx, const at::Tensor& pred, const wick::Batch& b) override;

  // What the probe hook reads through its typed access.
  std::int64_t forwards() const { return forwards_; }
  bool has_jit() const { return net_ && net_->enc; }
  bool jit_training() { return net_->enc->jit().is_training(); }
  double jit_sum() const;

 private:
  std::string jit_path_, jit_mode_;
  bool share_;
  std::shared_ptr<wick::TensorDataset> train_, valid_;
  std::shared_ptr<Net> net_;
  std::int64_t forwards_ = 0;
};

}  // namespace parts
