// CUDA graphs: after `warmup` eager steps, the training step's way to its gradients (the
// gradients stage: forward, loss, backward and the hooks among them) is captured once into a
// CUDA graph and replayed for every later batch, so that a step costs one graph launch instead
// of a kernel launch per operation: what pays on small models, where launching dominates.
//
// The batch is copied into the captured input tensors before each replay, and the replay
// writes the prediction, loss, metrics and gradients into the tensors captured with it; the
// optimizer step, zero_grad and the hooks at before_step and after_step run eagerly as usual.
// A hook at after_step reads the captured prediction itself, which the next replay overwrites:
// one that keeps it past the step clones it.
// Host code inside the captured part (handlers of the forward and backward stages, hooks at
// after_pred, after_loss and after_backward) runs once, at capture; each replay repeats only
// the GPU work it queued then.
//
// Refused, with the reason, where a replay would not do what the eager step does: shapes that
// change (the last, smaller batch: set trainer.drop_last = true), a hook that syncs the host
// inside the step (caught at capture), grad_accum windows, manual optimization,
// data-parallel training, nan_policy "skip" and a device that is not CUDA.
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <wick/task.hpp>
#include <wick/wick.hpp>

namespace {

std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "(none)";
  std::string s = "[";
  for (std::size_t i = 0; i < t.sizes().size(); ++i)
    s += (i ? ", " : "") + std::to_string(t.sizes()[i]);
  return s + "] " + std::string(c10::toString(t.scalar_type()));
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type());
}

// `work` queued on a side stream that first waits for the current one, which then waits for
// it, however `work` ends (a hook's CancelStep in a warm-up step): capture (and the warm-up
// before it) must not run on the default stream.
template <class F>
void on_side_stream(const at::Device& dev, F&& work) {
  const auto current = c10::cuda::getCurrentCUDAStream(dev.index());
  const auto side = c10::cuda::getStreamFromPool(false, dev.index());
  at::cuda::CUDAEvent before;
  before.record(current);
  before.block(side);
  struct Join {
    c10::cuda::CUDAStream side, current;
    ~Join() noexcept(false) {
      try {
        at::cuda::CUDAEvent after;
        after.record(side);
        after.block(current);
      } catch (...) {
        if (!std::uncaught_exceptions()) throw;  // else the error in flight is the one to see
      }
    }
  } join{side, current};
  const c10::cuda::CUDAStreamGuard guard(side);
  work();
}

class CudaGraph : public wick::Hook {
 public:
  // What the run's facts settle is refused here, so that `wick check` refuses it too (exit 2).
  explicit CudaGraph(const wick::Params& p) : warmup_(p.get_int("warmup")) {
    if (warmup_ < 1)
      throw p.error("warmup",
                    "must be >= 1: lazy set-up on the first step (optimizer state, cuDNN "
                    "plans) must not be captured");
    const auto& run = p.run();
    const std::string why = "replays one captured step";
    if (run.world_size > 1)
      throw p.error(why +
                    ", but data-parallel training all-reduces gradients from host code during "
                    "backward; train on one GPU or remove cuda_graph");
    if (run.nan_policy == wick::NanPolicy::skip)
      throw p.error(why +
                    ", whose gradients are computed before the loss can be read, so a "
                    "non-finite step cannot be skipped: set trainer.nan_policy = \"error\" or "
                    "\"ignore\"");
    if (!run.device.is_cuda())
      throw p.error("captures CUDA work, but trainer.device is \"" + run.device.str() +
                    "\"; set trainer.device = \"cuda\"");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) {
      refuse_what_cannot_replay(c);
      graph_.reset();
      steps_ = 0;
    });
    r.stage(wick::Stage::gradients, [this](wick::Context& c, wick::Next next) {
      if (++steps_ <= warmup_) {
        bool r = false;
        on_side_stream(device_, [&] { r = next(); });
        return r;
      }
      if (!graph_) return capture(c, next);
      replay(c);
      return true;
    });
  }

 private:
  // Before anything runs: what the hooks settle (the constructor refused the rest).
  void refuse_what_cannot_replay(wick::Context& c) {
    const std::string why = "cuda_graph replays one captured step";
    if (c.task().manual_optimization())
      throw std::runtime_error(why +
                               ", but this task drives its own steps (manual "
                               "optimization); remove cuda_graph");
    if (c.state().grad_accum_steps > 1)
      throw std::runtime_error(
          why + ", but grad_accum (steps = " + std::to_string(c.state().grad_accum_steps) +
          ") makes micro-batches differ: the last of each window steps, the others add to the "
          "gradients; remove grad_accum and raise trainer.batch_size, or remove cuda_graph");
    device_ = at::Device(c.run().device.str());
    if (device_.index() < 0) device_ = at::Device(at::kCUDA, c10::cuda::current_device());
  }

  bool capture(wick::Context& c, wick::Next& next) {
    auto& b = c.batch();
    // The step reads the batch from tensors that every replay refills.
    in_ = b.input.clone();
    target_ = b.target.defined() ? b.target.clone() : at::Tensor();
    b.input = in_;
    b.target = target_;
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    // The captured step allocates from a pool of its own: the eager steps' cached blocks go
    // back to the device first, or a large model holds its memory twice.
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    std::string failure;
    auto message = [](const std::exception& e) {
      const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
      return std::string(c10_error ? c10_error->what_without_backtrace() : e.what());
    };
    on_side_stream(device_, [&] {
      // Thread-local: the loader threads go on pinning the next batches (a pinned block's
      // event query or cudaHostAlloc), which a global capture forbids on every thread.
      graph_->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        next();
      } catch (const std::exception& e) {
        failure = message(e);
      }
      try {
        graph_->capture_end();
      } catch (const std::exception& e) {
        if (failure.empty()) failure = message(e);
      }
    });
    if (!failure.empty()) {
      graph_.reset();
      std::string hint = "remove cuda_graph";
      if (failure.find("out of memory") != std::string::npos)
        hint =
            "the captured step needs memory beside what the model holds: lower "
            "trainer.batch_size, or remove cuda_graph";
      // CUDA's own words for a call a capture forbids (a host wait, the legacy stream).
      else if (failure.find("not permitted when stream is capturing") != std::string::npos ||
               failure.find("previous error during capture") != std::string::npos ||
               failure.find("depend on a capturing") != std::string::npos)
        hint =
            "something inside it waits for the GPU (a .item(), printing a tensor, a copy "
            "to the CPU): the hook running then is named above; move that work to "
            "after_step, or remove cuda_graph";
      throw std::runtime_error("cuda_graph cannot capture the step: " + failure + ". " + hint);
    }
    // What the replays write: the outputs and the gradients backward made during capture.
    const auto& out = c.output();
    pred_ = out.pred;
    loss_ = out.loss;
    metrics_ = out.metrics;
    grads_.clear();
    for (const auto& p : c.model().parameters())
      if (p.grad().defined()) grads_.push_back({p, p.grad()});
    // Capture records the work without running it: this step's results come from a replay.
    graph_->replay();
    publish(c);
    return true;
  }

  void replay(wick::Context& c) {
    auto& b = c.batch();
    if (!same_layout(b.input, in_) || !same_layout(b.target, target_))
      throw std::runtime_error(
          "cuda_graph: batch " + std::to_string(c.state().batch_idx) + " has input " +
          shape_of(b.input) + " and target " + shape_of(b.target) +
          ", but the step was captured for input " + shape_of(in_) + " and target " +
          shape_of(target_) +
          "; a captured step replays fixed shapes: set trainer.drop_last = true when the last "
          "batch is smaller, make the task's batches one shape, or remove cuda_graph");
    in_.copy_(b.input, /*non_blocking=*/true);
    if (target_.defined()) target_.copy_(b.target, /*non_blocking=*/true);
    b.input = in_;
    b.target = target_;
    // zero_grad set the gradients to none after the last step; the replay writes them where
    // the captured backward put them.
    for (auto& [p, g] : grads_) p.mutable_grad() = g;
    graph_->replay();
    publish(c);
  }

  // The step's outputs. The loss and metrics are copies: the trainer keeps them past the step
  // (the epoch's means; the loss check under nan_policy "error", which reads the losses in
  // batches) and the next replay overwrites the captured tensors. The prediction is the
  // captured one, as a CUDA graph's static output is: a copy would cost a pass over it each
  // step (GPT-2's bf16 logits: 1.6 GB, about 1 ms on an H100), and nothing keeps it.
  void publish(wick::Context& c) {
    auto& out = c.output();
    out.pred = pred_.detach();
    out.loss = loss_.detach().clone();
    out.metrics.clear();
    for (const auto& [k, v] : metrics_) out.metrics.emplace_back(k, v.detach().clone());
  }

  std::int64_t warmup_;
  std::int64_t steps_ = 0;
  at::Device device_{at::kCUDA};
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  at::Tensor in_, target_, pred_, loss_;
  std::vector<std::pair<std::string, at::Tensor>> metrics_;
  std::vector<std::pair<at::Tensor, at::Tensor>> grads_;  // parameter, its captured gradient
};

}  // namespace

WICK_PLUGIN(CudaGraph,
            wick::PluginDef("cuda_graph", "1.0.0",
                            "CUDA graphs: the training step captured once after warm-up and "
                            "replayed per batch (static shapes, one GPU)")
                .one_instance()
                .order(10)
                .param_int("warmup", 3, "eager steps before the step is captured"))
