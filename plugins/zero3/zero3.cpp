// Data parallelism with the parameters sharded by owner (ZeRO stage 3, simply): a second
// wick::DataParallelStrategy beside ddp, on c10d (Gloo; NCCL for CUDA devices).
//
// - Each trainable parameter belongs whole to one rank (wick::balanced_owners over the
//   parameters last layer first). Between steps a rank holds only its own parameters, their
//   gradients and their optimizer state; the others' parameters are freed (empty tensors).
// - before_step: the freed parameters are gathered for forward and backward, each owner's
//   share broadcast in one buffer.
// - optimizer_step stage (order -7, as ddp's): the gradients are all-reduced in one flat
//   buffer per dtype and averaged; each rank keeps its own and steps them (its optimizer's
//   groups hold its parameters only, zero.hpp); then the others' parameters are freed again.
// - The framework reads the whole model through gather_whole (validation, checkpoints, the
//   fit's end); checkpoints hold the whole state as one process writes it, so a run resumes
//   on any number of ranks. Hooks that read the weights between steps (ema, swa) see only this
//   rank's parameters: they need ddp.
// Simple by design: no overlap with backward, one all-reduce per step for the stop flag.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "timeout.hpp"
#include "zero.hpp"

#include <wick/rendezvous.hpp>
#include <wick/torch_compat.hpp>
#include <wick/wick.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

class Zero3 : public wick::Hook, public wick::DataParallelStrategy {
 public:
  explicit Zero3(const wick::Params& p) : timeout_(wick_ddp::collective_timeout(p)) {
    if (p.run().nan_policy == wick::NanPolicy::skip)
      throw p.error(
          "needs every rank to take part in every optimizer step, but trainer.nan_policy = "
          "\"skip\" skips steps on one rank alone; use \"error\"");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) { setup(c); });
    r.on(wick::Point::before_step, [this](wick::Context&) {
      if (pg_ && freed_) gather_params();
    });
    r.stage(wick::Stage::optimizer_step, [this](wick::Context& c, wick::Next next) {
      if (!pg_) return next();
      reduce_gradients();
      zero_->before_step(c.optimizer());
      const bool stepped = next();
      free_params();
      return stepped;
    });
    r.needs(wick::Stage::optimizer_step, wick::Capability::accumulated_gradients,
            "gradients are all-reduced once per optimizer step, after accumulation");
    r.provides(wick::Stage::optimizer_step, wick::Capability::reduced_gradients);
    r.on(wick::Point::after_fit, [this](wick::Context&) {
      if (pg_)
        std::fprintf(stderr,
                     "zero3: rank %d holds %lld of %lld trainable parameter elements between "
                     "steps\n",
                     rank_, static_cast<long long>(held_), static_cast<long long>(total_numel_));
    });
  }

  // ---- wick::DataParallelStrategy ---------------------------------------------------------
  void all_reduce_sum(at::Tensor& t) override { wick_ddp::all_reduce_host(comm(), t); }
  void barrier() override { wait(pg_->barrier(), "barrier"); }
  bool agree_stop(bool local, bool /*epoch_end*/) override {
    // [a hook's stop request, any stop request (a stop signal's too)] over the ranks.
    auto flags =
        torch::tensor({ctx_->stop_requested() ? 1.0 : 0.0, local ? 1.0 : 0.0}, torch::kDouble);
    all_reduce_sum(flags);
    // A hook's request elsewhere stops this rank's fit too; a stop signal is the trainer's.
    if (flags[0].item<double>() > 0 && !ctx_->stop_requested())
      ctx_->request_stop("stop requested by another rank");
    return flags[1].item<double>() > 0;
  }
  void gather_whole(Whole what) override {
    if (weights_held_++ == 0 && freed_) gather_params();
    if (what == Whole::training_state && state_held_++ == 0) zero_->gather_for_save();
    if (weights_held_ == 1) broadcast_buffers();  // rank 0's, as ddp uses for validation
  }
  void release_whole(Whole what) noexcept override {
    if (what == Whole::training_state && --state_held_ == 0) zero_->release_after_save();
    if (--weights_held_ == 0 && stepped_) free_params();
  }
  bool sharded() const override { return true; }
  std::vector<wick::MemoryRow> memory_rows(const std::vector<wick::ParamBytes>& trainable,
                                           std::int64_t other_bytes, int ranks) const override {
    const std::vector<wick::ParamBytes> ps(trainable.rbegin(), trainable.rend());
    std::vector<std::int64_t> numels;
    for (const auto& p : ps) numels.push_back(p.numel);
    const auto owners = wick::balanced_owners(numels, std::max(1, ranks));
    std::vector<std::int64_t> bytes(static_cast<std::size_t>(std::max(1, ranks))), state(bytes);
    for (std::size_t i = 0; i < ps.size(); ++i) {
      bytes[static_cast<std::size_t>(owners[i])] += ps[i].bytes;
      state[static_cast<std::size_t>(owners[i])] += ps[i].state_bytes;
    }
    const auto most = [](const std::vector<std::int64_t>& v) {
      return *std::max_element(v.begin(), v.end());
    };
    return {{"zero3", other_bytes + most(bytes), most(bytes), most(state)}};
  }

 private:
  void setup(wick::Context& c) {
    world_ = static_cast<int>(c.state().num_processes);
    rank_ = static_cast<int>(c.state().rank);
    c.set_data_parallel(nullptr);
    // Refused on one process too (where zero3 does nothing), so a config is found out before
    // it is started on several.
    if (c.optimizer_names().size() > 1)
      throw wick::ConfigError(
          "zero3: one optimizer only (each rank steps its own parameters with it); for several "
          "optimizers use [[hooks]] plugin = \"ddp\"");
    if (world_ <= 1) return;  // one process: nothing to share
    auto store = wick::rendezvous(rank_, world_, timeout_, "wick", "zero3");
    device_ = torch::Device(c.run().device.str());
    if (device_.is_cuda())
      pg_ = wick::nccl_group(store, rank_, world_, timeout_, "zero3");
    else
      pg_ = wick::gloo_group(store, rank_, world_, timeout_);
    params_.clear();
    flats_.clear();
    for (auto& p : c.model().parameters())
      if (p.requires_grad()) params_.push_back(p);
    std::reverse(params_.begin(), params_.end());  // last layer first, as ddp's split
    zero_ = std::make_unique<wick_ddp::OptimizerShards>(comm(), params_,
                                                        wick_ddp::Sharing::whole_tensors);
    held_ = total_numel_ = 0;
    shapes_.clear();
    for (const auto& p : params_) {
      total_numel_ += p.numel();
      shapes_[p.unsafeGetTensorImpl()] = p.sizes().vec();  // what a freed one is gathered to
    }
    // Every rank starts from rank 0's weights; the sharding itself starts at the first step,
    // after any checkpoint restore.
    for (auto& p : c.model().parameters()) broadcast_from_0(p);
    broadcast_buffers_of(c.model());
    ctx_ = &c;
    model_ = &c.model();
    opt_ = &c.optimizer();
    freed_ = stepped_ = false;
    weights_held_ = state_held_ = 0;
    c.set_data_parallel(this);
  }

  // Every rank's full parameters again: the freed ones allocated, each share from its owner.
  void gather_params() {
    torch::NoGradGuard no_grad;
    for (auto& p : params_)
      if (zero_->whole_owner(p) != rank_)
        p.set_data(torch::empty(shapes_.at(p.unsafeGetTensorImpl()), p.options()));
    zero_->broadcast_shares(*opt_, /*keep_buffers=*/false);
    freed_ = false;
  }

  // The others' parameters freed (their owners keep them). Local only: nothing throws here
  // but an allocation of an empty tensor.
  void free_params() noexcept {
    stepped_ = true;
    // Already freed, or the framework reads the whole model now (its release frees them).
    if (freed_ || weights_held_ > 0) return;
    try {
      for (auto& p : params_) {
        if (zero_->whole_owner(p) == rank_) continue;
        p.mutable_grad() = at::Tensor();
        p.set_data(torch::empty({0}, p.options()));
      }
      freed_ = true;
      held_ = 0;  // measured, for the report at the end
      for (const auto& p : params_) held_ += p.numel();
    } catch (...) {
    }
  }

  // The gradients summed over ranks and averaged, in one flat buffer per dtype, freed after
  // (set_(): on this thread, even while Gloo's finished work still holds the tensor); a rank
  // keeps its own parameters' (the others' owners step them).
  void reduce_gradients() {
    torch::NoGradGuard no_grad;
    if (flats_.empty()) {
      std::map<at::ScalarType, Flat> by_dtype;
      for (std::size_t i = 0; i < params_.size(); ++i) {
        auto& f = by_dtype[params_[i].scalar_type()];
        f.ids.push_back(i);
        f.numel += params_[i].numel();
      }
      for (auto& [dtype, f] : by_dtype) flats_.push_back(std::move(f));
    }
    const double inv = 1.0 / world_;
    for (auto& f : flats_) {
      f.buf = torch::empty({f.numel}, params_[f.ids.front()].options());
      std::int64_t at = 0;
      for (auto i : f.ids) {
        const auto& g = params_[i].grad();
        auto slot = f.buf.narrow(0, at, params_[i].numel());
        at += params_[i].numel();
        if (g.defined())
          slot.copy_(g.detach().reshape({-1}));
        else
          slot.zero_();  // a parameter without a gradient on this rank contributes nothing
      }
      std::vector<at::Tensor> io{f.buf};
      wait(pg_->allreduce(io), "gradient all-reduce");
      at = 0;
      for (auto i : f.ids) {
        auto& p = params_[i];
        const auto sum = f.buf.narrow(0, at, p.numel()).view(p.sizes());
        at += p.numel();
        if (zero_->whole_owner(p) != rank_)
          p.mutable_grad() = at::Tensor();
        else if (p.grad().defined())
          at::mul_out(p.mutable_grad(), sum, inv);
        else
          p.mutable_grad() = sum * inv;
      }
      f.buf.set_();
    }
  }

  // How zero.hpp's code reaches the ranks: this hook's group and its wait.
  wick_ddp::Comm comm() {
    return {pg_, device_, rank_, world_,
            [this](const c10::intrusive_ptr<c10d::Work>& w, const char* what) { wait(w, what); }};
  }

  void broadcast_from_0(const at::Tensor& t) {
    std::vector<at::Tensor> v{t.detach()};
    wait(pg_->broadcast(v), "broadcast from rank 0");
  }
  void broadcast_buffers_of(torch::nn::Module& m) {
    for (auto& b : m.buffers()) broadcast_from_0(b);
  }
  void broadcast_buffers() {
    if (model_) broadcast_buffers_of(*model_);
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* what) {
    try {
      w->wait(timeout_);
    } catch (const std::exception& e) {
      const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
      throw std::runtime_error(
          std::string("zero3: ") + what + " on rank " + std::to_string(rank_) +
          " failed: " + (c10_error ? c10_error->what_without_backtrace() : e.what()) +
          " (another rank died or stalled; timeout_s = " + std::to_string(timeout_.count() / 1000) +
          " s bounds how long ranks wait for each other)");
    }
  }

  std::chrono::milliseconds timeout_;
  int world_ = 1, rank_ = 0;
  c10::intrusive_ptr<wick::compat::CommBackend> pg_;
  torch::Device device_{torch::kCPU};
  std::vector<at::Tensor> params_;  // trainable, last layer first
  struct Flat {
    std::vector<std::size_t> ids;  // into params_
    std::int64_t numel = 0;
    at::Tensor buf;
  };
  std::vector<Flat> flats_;  // the gradient buffers, one per dtype, held during a step
  std::unique_ptr<wick_ddp::OptimizerShards> zero_;
  std::map<const c10::TensorImpl*, std::vector<std::int64_t>> shapes_;  // of the trainable
  std::int64_t held_ = 0, total_numel_ = 0;
  wick::Context* ctx_ = nullptr;
  torch::nn::Module* model_ = nullptr;
  torch::optim::Optimizer* opt_ = nullptr;
  bool freed_ = false;                     // the others' parameters are freed now
  bool stepped_ = false;                   // sharding has begun (at the first step)
  int weights_held_ = 0, state_held_ = 0;  // nested gather_whole calls
};

}  // namespace

WICK_PLUGIN(Zero3, wick::PluginDef("zero3", "1.0.0",
                                   "Data-parallel training with each parameter, its gradient and "
                                   "its optimizer state kept by one rank (ZeRO stage 3) and "
                                   "gathered for forward")
                       .one_instance()
                       .order(-7)
                       .param_float("timeout_s", 300.0,
                                    "seconds before a collective (or the rendezvous) gives up on "
                                    "a peer (0.001 to 604800)"))
