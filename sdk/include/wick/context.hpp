// What a hook sees when it is called. Torch types are only forward-declared here; a hook
// that touches tensors includes <torch/torch.h> (or wick/task.hpp) itself.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "wick/metrics.hpp"
#include "wick/state.hpp"

#include "wick/version.hpp"

namespace at {
class Tensor;
}
namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace wick {

struct Batch;
struct Output;
class Trainer;

// Facts about the run, fixed for its duration.
struct RunInfo {
  std::string config_path;  // absolute path of the config file ("" for a host program)
  std::string output_dir;   // absolute path of the run directory
  std::string resume;       // "", "latest" or a checkpoint path, from --resume
  std::string device;       // "cpu", "cuda", "cuda:1"
  std::int64_t seed = 0;
};

class WICK_EXPORT Context {
 public:
  StepState& state() { return *state_; }
  const RunInfo& run() const { return *run_; }
  Trainer& trainer() { return *trainer_; }

  // The current batch and what the task's step returned for it (valid from after_pred on).
  Batch& batch() { return *batch_; }
  Output& output() { return *output_; }
  // The loss the backward stage differentiates. It starts as output().loss each step;
  // handlers may rescale it (accumulation, loss scaling) without touching the logged loss.
  at::Tensor& backward_loss() { return *backward_loss_; }

  torch::nn::Module& model() { return *model_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }

  // Adds a value to the next metrics record. The tensor overload defers the device sync to
  // when the record is written, so logging per step costs no sync per step.
  void log(std::string_view key, double value);
  void log(std::string_view key, const at::Tensor& scalar);

  // Asks the trainer to stop at the end of the current step (graceful: after_epoch is not
  // cut short and the run counts as completed). Safe to call from any point.
  void request_stop(std::string_view reason);
  bool stop_requested() const;

  // The latest record written (empty before the first one).
  const Record& last_record() const;

 private:
  friend class Trainer;
  StepState* state_ = nullptr;
  const RunInfo* run_ = nullptr;
  Trainer* trainer_ = nullptr;
  Batch* batch_ = nullptr;
  Output* output_ = nullptr;
  at::Tensor* backward_loss_ = nullptr;
  torch::nn::Module* model_ = nullptr;
  torch::optim::Optimizer* optimizer_ = nullptr;
};

}  // namespace wick
