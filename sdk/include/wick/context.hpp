// What a hook, a stage handler or a task sees of the run: the host's services, through SDK
// types only. Torch types are only forward-declared here; code that touches tensors includes
// <torch/torch.h> (or wick/task.hpp) itself.
#pragma once

#include <cxxabi.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "wick/checkpoint.hpp"
#include "wick/collectives.hpp"
#include "wick/data_parallel.hpp"
#include "wick/metrics.hpp"
#include "wick/profile.hpp"
#include "wick/run.hpp"
#include "wick/sharded_state.hpp"
#include "wick/state.hpp"
#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

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
class Task;

// Why a scope was cancelled; told to after_cancel hooks by Context::cancellation().
enum class CancelScope : std::uint8_t { step, epoch, fit };
enum class CancelReason : std::uint8_t {
  cancel_step,   // a hook threw CancelStep
  cancel_epoch,  // a hook threw CancelEpoch
  cancel_fit,    // a hook threw CancelFit (or a Cancel outside its scope)
  interrupt,     // SIGINT
  failure        // an exception: message says which plugin, where and what
};
struct CancelInfo {
  CancelScope scope = CancelScope::fit;
  CancelReason reason = CancelReason::failure;
  std::string message;
  bool ends_fit() const { return scope == CancelScope::fit; }
};
std::string_view to_string(CancelScope s);
std::string_view to_string(CancelReason r);

class WICK_EXPORT Context {
 public:
  struct Host;  // the framework's side, opaque to plugins
  explicit Context(Host* host) : host_(host) {}
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // ---- where the loop is, and the run's facts --------------------------------------------
  const StepState& state() const;
  const RunInfo& run() const;

  // ---- the step -----------------------------------------------------------------------
  // The current batch, on the run's device (valid from the forward stage of a step on).
  Batch& batch();
  // The step's prediction (output().pred, from after_pred on), loss and per-batch metrics
  // (from after_loss on). Hooks at after_pred may replace the prediction, hooks at after_loss
  // the loss (label smoothing): the trainer uses what is there afterwards.
  Output& output();
  // Since SDK 2.9: named tensors that forward hands to loss beside the prediction (a VAE's
  // mu and log_var): forward calls set_extra(name, t) (a name set twice keeps the last), and
  // loss, or a hook from after_pred on, reads extra(name). They belong to the step: cleared
  // when the next forward starts, set again when recompute_loss runs forward again.
  // extra() throws std::invalid_argument naming the extras that were set.
  void set_extra(const std::string& name, const at::Tensor& t);
  const at::Tensor& extra(const std::string& name) const;
  bool has_extra(const std::string& name) const;
  // The loss the backward stage differentiates. It starts as output().loss each step;
  // handlers may rescale it (accumulation, loss scaling) without touching the logged loss.
  at::Tensor& backward_loss();

  // ---- what is trained -------------------------------------------------------------------
  torch::nn::Module& model();
  Task& task();
  // The task as its own class, for a hook built with it (same library): throws
  // std::logic_error naming the wanted type when the run's task is another one.
  template <class T>
  T& task();
  // The optimizer the running stage works for; outside a stage, the first optimizer.
  torch::optim::Optimizer& optimizer();
  // Its name: "optimizer" for a config's single [optimizer], else the module's name of its
  // [optimizers.NAME] table.
  const std::string& optimizer_name() const;
  // Every optimizer's name, in config order, and an optimizer by name (throws
  // std::invalid_argument naming the known ones).
  std::vector<std::string> optimizer_names() const;
  torch::optim::Optimizer& optimizer(std::string_view name);
  // Since SDK 2.20: the learning rate this run's config gives parameter group `group` of the
  // named optimizer (its table's lr, or its [[groups]] lr): what a schedule scales. The
  // group's own lr is where a schedule or a resumed checkpoint left it. Throws
  // std::invalid_argument for an optimizer or group the run does not have.
  double configured_lr(std::string_view optimizer, std::size_t group) const;

  // ---- manual optimization (a task whose manual_optimization() is true) ----------------
  // In the task's train_step: runs the backward stage chain on `loss` for the named
  // optimizer (accumulation, loss scaling...), then after_backward. A non-finite loss follows
  // trainer.nan_policy (error: throws; skip: no backward, the step counts as skipped).
  void backward(const at::Tensor& loss, std::string_view optimizer);
  // Runs the optimizer_step chain (accumulation, unscaling, clipping...) and then the
  // zero_grad chain for the named optimizer; true when it really stepped.
  bool step(std::string_view optimizer);
  // Runs the zero_grad chain for the named optimizer (gradients another backward left on
  // its parameters, e.g. the discriminator's after the generator's backward).
  void zero_grad(std::string_view optimizer);

  // ---- what stage handlers may change ------------------------------------------------------
  // Micro-batches per optimizer step (grad_accum sets it in before_fit).
  void set_accumulation(std::int64_t steps);
  // An optimizer_step handler that declines the step for a reason the run should count
  // (non-finite gradients) calls this and returns false without calling next().
  void count_skipped_step();
  // Since SDK 2.4, in an optimizer_step handler of a training step (not under manual
  // optimization): runs the step's forward stage, after_pred, the task's loss and after_loss
  // again on the current batch at the current weights (so autocast, channels-last and loss
  // transforms such as label smoothing or mixup apply as in the first pass), then adds the
  // loss's gradients to the parameters' .grad by plain autograd (no backward stage: no
  // accumulation scaling, no loss scaling, no all-reduce). Returns the loss. The step's
  // logged loss and metrics stay those of the first pass. Sharpness-aware minimization
  // takes its second gradient with it.
  at::Tensor recompute_loss();

  // ---- records ----------------------------------------------------------------------------
  // Adds a value to the next metrics record. The tensor overload defers the device sync to
  // when the record is written, so logging per step costs no sync per step.
  void log(std::string_view key, double value);
  void log(std::string_view key, const at::Tensor& scalar);
  // The latest record written (empty before the first one).
  const Record& last_record() const;
  // Since SDK 2.3: the timings so far, when a hook asked for them (Registrar::request_profile);
  // else a Profile with enabled == false.
  Profile profile() const;
  // Since SDK 2.6: peak tensor memory per phase so far, when a hook asked for a profile; else
  // a MemoryProfile with enabled == false.
  MemoryProfile memory_profile() const;

  // ---- stopping and cancelling -------------------------------------------------------------
  // Asks the trainer to stop at the end of the current step (graceful: after_epoch is not
  // cut short and the run counts as completed); asked at before_fit or before_epoch, before
  // the epoch's first step. Safe to call from any point. The checkpoint
  // the fit ends with keeps it (also a cancel checkpoint of a stop signal that came first): a
  // run resumed from it with the same epochs and max_steps trains no more.
  void request_stop(std::string_view reason);
  bool stop_requested() const;
  // During after_cancel: what was cancelled and why. nullptr at any other point.
  const CancelInfo* cancellation() const;

  // ---- data-parallel ----------------------------------------------------------------------
  // A data-parallel plugin installs its collectives in before_fit (it keeps ownership and
  // must outlive the fit, or install nullptr again). nullptr: one process.
  void set_collectives(Collectives* c);
  Collectives* collectives() const;
  // Collectives::barrier when installed, else nothing: call it on every process.
  void barrier();
  // Since SDK 2.6: a plugin that shards optimizer state over processes installs it in
  // before_fit (wick/sharded_state.hpp; it keeps ownership). nullptr: nothing is sharded.
  // With a strategy installed: a view of it when it shards (DataParallelStrategy::sharded).
  void set_sharded_state(ShardedState* s);
  ShardedState* sharded_state() const;
  // Since SDK 2.11: a data-parallel strategy (wick/data_parallel.hpp) installs itself in
  // before_fit; it is the run's collectives too, and the framework gathers the whole model
  // through it. The plugin keeps ownership; nullptr uninstalls it.
  void set_data_parallel(DataParallelStrategy* s);

  // ---- checkpoints (see wick/checkpoint.hpp) ------------------------------------------------
  // The position the loop is at. Meaningful between steps: at before_epoch, before_step
  // (before any work of that step), before_valid, after_epoch, after_fit.
  Position position() const;
  // Since SDK 2.23: the training batches this process runs in an epoch dealt from its start at
  // this run's world size and batch size, from before_epoch on. It is
  // StepState::batches_in_epoch, but in an epoch resumed on another world size or batch size:
  // that one counts the checkpoint's run's batches before the resume point plus the rest,
  // dealt anew. A schedule that derives its length from the run's epochs uses this one for
  // the epochs after.
  std::int64_t whole_epoch_batches() const;
  // True where a checkpoint continues the run exactly: between training steps, not in
  // validation, not inside a step (after_cancel of a failure mid-step is false).
  bool between_steps() const;
  // Writes a checkpoint of the run at position() into `folder` (absolute, or relative to
  // the run directory), atomically: a temporary folder, every file fsynced, renamed into
  // place (replacing an older folder of that name only once the new one is complete).
  // Rank 0 writes; other ranks return at once. With state sharded over the ranks (a sharding
  // strategy, wick/sharded_state.hpp) every rank must call it at the same point: the state is
  // gathered to rank 0 first. Throws std::runtime_error naming the folder
  // and the cause (full disk, permissions); earlier checkpoints are never touched. Inside a
  // training step (after_pred to the optimizer's stages) it throws std::logic_error: a resume
  // could not continue a step part of which has run.
  CheckpointInfo save_checkpoint(const std::string& folder, const std::string& reason);
  // Checks a checkpoint folder as untrusted input (manifest types, plain file names inside
  // the folder, regular files only, sizes, sha256, a position this run can continue from)
  // without loading it. Throws CheckpointError with the reason.
  CheckpointInfo inspect_checkpoint(const std::string& folder) const;
  // Restores everything a checkpoint holds and makes fit() continue at its position; only
  // in before_fit. Metrics records (metrics.jsonl and every record sink) are rewound to the
  // checkpoint's count. Throws CheckpointError (unusable) or std::runtime_error (a model,
  // optimizer or run that does not match: seed, batch size, world size, shuffle, drop_last).
  CheckpointInfo restore_checkpoint(const std::string& folder);

 private:
  Task* task_ptr();
  Host* host_;
};

template <class T>
T& Context::task() {
  if (auto* t = dynamic_cast<T*>(task_ptr())) return *t;
  // The wanted type by its C++ name (demangled; the ABI's name where that fails).
  const char* mangled = typeid(T).name();
  int status = 0;
  char* name = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  const std::string wanted = status == 0 && name ? name : mangled;
  std::free(name);
  throw std::logic_error("Context::task<" + wanted + ">(): the run's task is not a " + wanted +
                         " (a hook built for another task; check [task] plugin)");
}

}  // namespace wick

WICK_PUBLIC_END
