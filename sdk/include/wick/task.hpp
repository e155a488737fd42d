// The task contract: what `wick fit` needs beside the hooks. A task plugin (or a host
// program) provides the model, the data, the forward pass and the loss; the trainer does the
// rest (backward, optimizer steps, validation, checkpoints), with the hooks.
// This header includes LibTorch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "wick/context.hpp"
#include "wick/hook.hpp"
#include "wick/state.hpp"
#include "wick/state_dict.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

class Params;

struct Batch {
  at::Tensor input;
  at::Tensor target;
};

struct Output {
  at::Tensor pred;  // what Task::forward returned (hooks at after_pred may replace it)
  at::Tensor loss;  // scalar, mean over the batch
  // Per-batch means of the batch's samples, e.g. {"accuracy", (pred.argmax(1) ==
  // target).to(kFloat).mean()}. Training steps: logged as "train/NAME", the mean over each
  // step record's window and over the epoch; validation: "valid/NAME"; both weighted by batch
  // size (means over samples, as the loss's).
  std::vector<std::pair<std::string, at::Tensor>> metrics;
};

// What a Dataset::get call is for. Draw random augmentation from `generator`, not from the
// global generator: it is seeded from (run seed, phase, epoch, batch), so the same batch gets
// the same draws whatever the resume point and whichever thread loads it.
struct Fetch {
  Phase phase = Phase::train;
  std::int64_t epoch = 0;
  std::int64_t batch = 0;  // index of the batch within its epoch and phase
  at::Generator generator;
};

// The generator of the batch the calling thread is loading (the same as its Fetch's), for
// per-sample code that has no Fetch argument (a torch::data dataset's get(i), see
// wick/torch_data.hpp). Throws std::logic_error outside a Dataset::get called by the trainer.
at::Generator fetch_generator();

// What Dataset::size() returns for a stream: data without a size. An epoch is then
// trainer.steps_per_epoch batches, and get() receives running sample numbers: batch b of
// epoch e holds (g * world + rank) * batch_size + [0, batch_size) with
// g = e * steps_per_epoch + b, so every sample number is drawn once, in order, on one rank.
constexpr std::int64_t kUnsized = -1;

// A data set from which a whole batch is cut by index. With trainer.num_workers > 0, get()
// runs on loader threads, several batches at once (one at a time and in batch order when
// has_state()): it must not touch the model or a hook, and concurrent calls must be safe.
class Dataset {
 public:
  virtual ~Dataset() = default;
  // The number of samples, or kUnsized for a stream.
  virtual std::int64_t size() const = 0;
  // indices: 1-D int64 CPU tensor of sample positions (running sample numbers for a stream).
  // Returns CPU tensors, one row per index along the first dimension (input, and target when
  // there is one; a batch of another length is refused, naming the batch).
  virtual Batch get(const at::Tensor& indices, Fetch& fetch) = 0;
  // Checkpoint state of the training data (a stream's read position), as tasks and hooks
  // have. save_state runs after every get(), so it should be cheap; what the checkpoint keeps
  // is the state after the last batch the loop consumed, not after batches loaded ahead.
  virtual bool has_state() const { return false; }
  virtual void save_state(StateDict& /*out*/) const {}
  virtual void load_state(const StateDict& /*in*/) {}
};

// Datasets that are whole tensors in memory: get() is one index_select per tensor.
class TensorDataset : public Dataset {
 public:
  TensorDataset(at::Tensor input, at::Tensor target)
      : input_(std::move(input)), target_(std::move(target)) {}
  std::int64_t size() const override { return input_.size(0); }
  Batch get(const at::Tensor& indices, Fetch&) override {
    return {input_.index_select(0, indices), target_.index_select(0, indices)};
  }
  const at::Tensor& input() const { return input_; }
  const at::Tensor& target() const { return target_; }

 private:
  at::Tensor input_, target_;
};

// The optimizer used when the config has no [optimizer] table.
struct OptimizerDefaults {
  std::string name = "adam";
  double lr = 1e-3;
};

class Task {
 public:
  virtual ~Task() = default;
  // Built once, after the run's seed is set and before the optimizer. The trainer moves it
  // to the run's device, switches train/eval, checkpoints it and fingerprints it.
  virtual std::shared_ptr<torch::nn::Module> model() = 0;
  virtual std::shared_ptr<Dataset> train_data() = 0;
  virtual std::shared_ptr<Dataset> valid_data() { return nullptr; }
  // The prediction for a batch (already on the model's device). The trainer runs it inside
  // the forward stage (autocast and the like wrap it) and fires after_pred after it.
  virtual at::Tensor forward(Context& ctx, const Batch& batch) = 0;
  // The loss (and per-batch metrics) of a prediction; after_loss fires after it. In
  // validation both run under torch::NoGradGuard with the model in eval mode;
  // ctx.state().validating() tells which phase it is.
  virtual Output loss(Context& ctx, const at::Tensor& pred, const Batch& batch) = 0;
  virtual OptimizerDefaults default_optimizer() const { return {}; }
  // Manual optimization ("several backward passes and optimizer steps per batch", a GAN):
  // when true, the trainer calls train_step for each training batch instead of forward,
  // loss, backward and step; the task drives them through ctx.backward(loss, "name") and
  // ctx.step("name"), so the stage chains run per optimizer. Its Output (loss, metrics) is
  // logged as for any step, after_pred and after_loss fire after it returns. Validation
  // still uses forward and loss.
  virtual bool manual_optimization() const { return false; }
  virtual Output train_step(Context& /*ctx*/, const Batch& /*batch*/) {
    throw std::logic_error("manual_optimization() is true but the task has no train_step()");
  }
  // Checkpoint state of the task itself (a counter, a stream position), as hooks have.
  virtual bool has_state() const { return false; }
  virtual void save_state(StateDict& /*out*/) const {}
  virtual void load_state(const StateDict& /*in*/) {}
  // The task's own subscriptions to lifecycle points and stage chains (wick/hook.hpp), as a
  // hook's connect(): print a result at after_fit, write samples every N steps. Scheduled as
  // a hook named "task" at order 0 (wick describe shows it; errors are blamed on it).
  virtual void connect(Registrar& /*r*/) {}
};

// Cross-entropy of logits against integer labels and, when with_accuracy, "accuracy".
inline Output classification_loss(const at::Tensor& logits, const at::Tensor& target,
                                  bool with_accuracy) {
  Output o;
  o.loss = torch::nn::functional::cross_entropy(logits, target);
  if (with_accuracy)
    o.metrics.emplace_back("accuracy", logits.argmax(1).eq(target).to(torch::kFloat).mean());
  return o;
}

// A classifier: the task writes model(), the data and forward(); the loss is cross-entropy
// against integer labels, with "accuracy" in validation.
class ClassificationTask : public Task {
 public:
  Output loss(Context& ctx, const at::Tensor& pred, const Batch& batch) override {
    return classification_loss(pred, batch.target, ctx.state().validating());
  }
};

}  // namespace wick

WICK_PUBLIC_END
