// The task contract: what `wick fit` needs beside the hooks. A task plugin (or a host
// program) provides the model, the data and the forward step; the trainer does the rest.
// This header includes LibTorch.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace wick {

class Params;

struct Batch {
  at::Tensor input;
  at::Tensor target;
};

struct Output {
  at::Tensor pred;
  at::Tensor loss;  // scalar, mean over the batch
  // Per-batch means the trainer averages over validation (weighted by batch size) and logs as
  // "valid/NAME", e.g. {"accuracy", (pred.argmax(1) == target).to(kFloat).mean()}.
  std::vector<std::pair<std::string, at::Tensor>> metrics;
};

// A data set held so that a whole batch can be cut by index (no per-sample work).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  // indices: 1-D int64 CPU tensor of sample positions. Returns CPU tensors.
  virtual Batch get(const at::Tensor& indices) = 0;
};

// Datasets that are whole tensors in memory: get() is one index_select per tensor.
class TensorDataset : public Dataset {
 public:
  TensorDataset(at::Tensor input, at::Tensor target)
      : input_(std::move(input)), target_(std::move(target)) {}
  std::int64_t size() const override { return input_.size(0); }
  Batch get(const at::Tensor& indices) override {
    return {input_.index_select(0, indices), target_.index_select(0, indices)};
  }
  const at::Tensor& input() const { return input_; }
  const at::Tensor& target() const { return target_; }

 private:
  at::Tensor input_, target_;
};

// The step of a classifier: forward, cross-entropy against integer labels and, for
// validation, "accuracy". net is a module holder (e.g. torch::nn::Sequential).
template <class Net>
Output classification_step(Net& net, const Batch& b, bool with_accuracy) {
  Output o;
  o.pred = net->forward(b.input);
  o.loss = torch::nn::functional::cross_entropy(o.pred, b.target);
  if (with_accuracy)
    o.metrics.emplace_back("accuracy", o.pred.argmax(1).eq(b.target).to(torch::kFloat).mean());
  return o;
}

// The optimizer used when the config has no [optimizer] table.
struct OptimizerDefaults {
  std::string name = "adam";
  double lr = 1e-3;
};

class Task {
 public:
  virtual ~Task() = default;
  // Built once, before the optimizer. The trainer moves it to the run's device.
  virtual std::shared_ptr<torch::nn::Module> model() = 0;
  virtual std::shared_ptr<Dataset> train_data() = 0;
  virtual std::shared_ptr<Dataset> valid_data() { return nullptr; }
  // Forward and loss for one batch (already on the model's device). No backward here.
  virtual Output train_step(const Batch& batch) = 0;
  // Runs under torch::NoGradGuard with the model in eval mode.
  virtual Output eval_step(const Batch& batch) { return train_step(batch); }
  virtual OptimizerDefaults default_optimizer() const { return {}; }
};

}  // namespace wick
