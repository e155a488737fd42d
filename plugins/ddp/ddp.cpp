// Data-parallel training on torch.distributed's c10d: a TCPStore rendezvous and a Gloo process
// group (NCCL for CUDA devices when wick is built with it), set up from torchrun's
// environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; `wick launch` sets them).
//
// What it does, and where:
// - before_fit: joins the process group, broadcasts rank 0's parameters and buffers, installs
//   itself as the run's data-parallel strategy (wick/data_parallel.hpp): the all-reduce
//   (metrics), stop agreement and barrier (checkpoints) that the trainer and other hooks use,
//   the sharded optimizer state gathered for checkpoints, its rows of the memory estimate.
// - Gradient buckets: the trainable parameters in reverse order (the order backward produces
//   their gradients), cut into flat buckets as PyTorch's DDP does: a bucket closes once it
//   holds first_bucket_mb (the first) or bucket_mb (the others). A small first bucket lets the
//   first all-reduce start early; big later ones keep the number of all-reduces low, since on
//   Gloo each costs ~1.6 ms of latency whatever its size.
// - Overlap (overlap = true): a post-hook on each parameter's gradient accumulator copies the
//   finished gradient into its bucket while backward goes on; a full bucket's all-reduce
//   starts at once, on Gloo's threads, while backward computes the earlier layers. Buckets
//   start strictly in index order on every rank (collectives must be issued in the same order
//   everywhere), and only on the last micro-batch of an accumulation window (the backward
//   stage handler arms the hooks). The last bucket always starts in the optimizer_step stage.
// - Two ranks on Gloo: a bucket of at most two_rank_exchange_mb is all-reduced by one send and
//   one receive each way and an add. Gloo's ring all-reduce needs ~12 messages per call
//   between two processes (strace: 12 writev); for small buckets, where latency is all the
//   cost, the exchange measured 0.21 ms against 0.97 ms (1k floats) and 0.24 against 0.43 ms
//   (20k floats). Big buckets stay on the ring: its worker threads do the copying, and the
//   bytes, not the messages, are the cost there. Both give a + b on each rank, bit for bit.
// - optimizer_step stage, order -7: after grad_accum's boundary check (-10), before loss-scale
//   unscaling (-5) and clipping (0). Packs what the hooks did not (parameters without a
//   gradient on this rank contribute zeros), starts the remaining buckets, waits for all and
//   copies the averaged gradients back: one all-reduce per bucket per optimizer step.
// - Stop agreement without extra messages per step: the last bucket carries a trailer,
//   [stop flag, stop signal flag, compute ms of rank 0 .. world-1]. A stop requested (or a
//   stop signal got) on any rank before a step's all-reduce stops every rank after that step;
//   one requested later rides on the next all-reduce. After each epoch one small all-reduce agrees
//   on stops requested at epoch end (early stopping, main-process-only hooks). The compute times
//   give each rank its wait.
// - Checkpoints: hooks that write shared files call Context::barrier() on every rank (a no-op
//   without this plugin); rank 0 writes, the others wait, so nobody runs ahead of a half-
//   written checkpoint. Resuming needs the same world size (the data shards depend on it).
// - Several optimizers ([optimizers.NAME], a GAN): each optimizer's step all-reduces the whole
//   model's gradients, after backward (overlap is off): the communication is that of one step
//   per optimizer.
// - Not supported: a CancelStep / CancelEpoch thrown on one rank alone, and nan_policy "skip"
//   (both make ranks skip collectives the others run); they end in a timeout, not a hang. Two
//   backward passes into the same gradients in one micro-batch need overlap = false.
// - Timings (metrics, averaged over the log window): ddp/compute_ms (before_step to the
//   optimizer_step stage: forward, backward with the overlapped all-reduces, hooks),
//   ddp/comm_ms (the optimizer_step stage's part: pack, start, wait, unpack; the
//   communication not hidden behind backward), ddp/wait_ms (the part of comm_ms spent waiting
//   for the slowest rank's compute). Logged on each all-reduced step as the mean since the
//   last step record. After the run's first epoch rank 0 prints a note when comm_ms exceeded
//   compute_ms there, with the options.
// Over 500 lines for a reason: one class is both the hook and the Collectives, and its bucket
// filling, overlap and stop trailer share state that reads best in one place (ZeRO's sharding
// and the flat buffers have files of their own: zero.cpp, buckets.hpp).
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "buckets.hpp"
#include "memory.hpp"
#include "timeout.hpp"
#include "zero.hpp"

#include <wick/rendezvous.hpp>
#include <wick/task.hpp>
#include <wick/torch_compat.hpp>
#include <wick/wick.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

using wick_ddp::Bucket;
using wick_ddp::make_buckets;
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string fmt_ms(double ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", ms);
  return b;
}

class Ddp;

// Runs after a parameter's AccumulateGrad node, when the parameter's .grad is final for this
// backward pass.
struct GradReady : torch::autograd::FunctionPostHook {
  GradReady(Ddp* d, std::size_t i) : ddp(d), index(i) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override;
  Ddp* ddp;
  std::size_t index;
};

class Ddp : public wick::Hook, public wick::DataParallelStrategy {
 public:
  explicit Ddp(const wick::Params& p)
      : bucket_mb_(p.get_float("bucket_mb")),
        first_bucket_mb_(p.get_float("first_bucket_mb")),
        timeout_(wick_ddp::collective_timeout(p)),
        broadcast_(p.get_bool("broadcast_parameters")),
        overlap_(p.get_bool("overlap")),
        exchange_mb_(p.get_float("two_rank_exchange_mb")),
        shard_optimizer_(p.get_bool("shard_optimizer")),
        shard_gradients_(p.get_bool("shard_gradients")) {
    if (shard_gradients_ && !shard_optimizer_)
      throw p.error("shard_gradients",
                    "needs shard_optimizer = true (ZeRO stage 2 is stage 1 with the gradients "
                    "reduced to their owners)");
    if (bucket_mb_ <= 0) throw p.error("bucket_mb", "must be > 0 (megabytes per bucket)");
    if (exchange_mb_ < 0)
      throw p.error("two_rank_exchange_mb", "must be >= 0 (0: always Gloo's ring all-reduce)");
    if (first_bucket_mb_ <= 0)
      throw p.error("first_bucket_mb", "must be > 0 (megabytes in the first bucket)");
    // A conflict with [trainer], caught by `wick check` as well as `wick fit` (exit 2).
    if (p.run().nan_policy == wick::NanPolicy::skip)
      throw p.error(
          "needs every rank to take part in every optimizer step, but trainer.nan_policy = "
          "\"skip\" skips steps on one rank alone; use \"error\"");
  }

  ~Ddp() override { remove_grad_hooks(); }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) { setup(c); });
    r.on(wick::Point::before_step, [this](wick::Context& c) {
      if (c.state().training()) step_start_ = Clock::now();
    });
    // Buffers (batch-norm statistics) are updated by each rank's own batches; validation and
    // the final model (after_fit) use rank 0's, as PyTorch's DDP does with broadcast_buffers.
    r.on(wick::Point::before_valid, [this](wick::Context&) { broadcast_buffers(); });
    // Arms the gradient hooks for the backward pass of a window's last micro-batch only.
    r.stage(wick::Stage::backward, [this](wick::Context& c, wick::Next next) {
      if (!pg_ || !overlap_active_ || !c.state().training() || !c.state().is_accum_boundary())
        return next();
      begin_step();
      struct Disarm {
        Ddp* d;
        ~Disarm() { d->armed_ = false; }
      } disarm{this};
      armed_ = true;
      return next();
    });
    r.stage(wick::Stage::optimizer_step,
            [this](wick::Context& c, wick::Next next) { return reduce_gradients(c, next); });
    r.needs(wick::Stage::optimizer_step, wick::Capability::accumulated_gradients,
            "gradients are all-reduced once per optimizer step, after accumulation");
    r.provides(wick::Stage::optimizer_step, wick::Capability::reduced_gradients);
    // The timings logged each step are means over the steps since the last step record.
    r.on_record([this](const wick::Record& rec) {
      if (rec.kind == wick::Record::Kind::step) window_ = {};
    });
    r.on(wick::Point::after_epoch, [this](wick::Context& c) {
      if (pg_ && c.state().is_main_process() && !comm_noticed_ && total_.steps > 0)
        notice_if_comm_dominates(c);
      comm_noticed_ = true;  // the first epoch of the run decides
    });
    r.on(wick::Point::after_fit, [this](wick::Context& c) {
      broadcast_buffers();
      if (pg_ && c.state().is_main_process() && total_.steps > 0) print_totals();
      if (pg_) print_state_bytes(c);
    });
  }

  // Called by GradReady on the thread running backward: the training thread (on a GPU with
  // LibTorch 2: the step's pass runs there), or LibTorch's autograd thread for the GPU (LibTorch
  // 1.13, or a backward a plugin runs itself).
  void grad_ready(std::size_t i) {
    if (!armed_) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (ready_[i]) {
      if (twice_ == kNone) twice_ = i;  // reported by reduce_gradients, on the training thread
      return;
    }
    ready_[i] = 1;
    const Slot s = slot_[i];
    Bucket& b = grad_buckets_[s.bucket];
    pack_one(b, s.index, true);
    if (--b.pending == 0) start_ready_buckets();
  }

 private:
  // Where exchanging gradients costs more than computing them (a small model on Gloo), more
  // ranks slow training down: say so once, with the measured split and the remedies.
  void notice_if_comm_dominates(wick::Context& c) const {
    const double n = static_cast<double>(total_.steps);
    // Waiting for a slower rank is imbalance, not communication: it does not count.
    if (total_.comm - total_.wait <= total_.compute) return;
    std::fprintf(stderr,
                 "ddp: note: in epoch %lld communication took longer than computation: per step "
                 "%.3f ms exchanging gradients after backward, %.3f ms of forward and backward "
                 "(%d ranks), so these ranks may train slower than one process. Options: fewer "
                 "ranks; [[hooks]] plugin = \"grad_accum\" (one exchange per K batches); a "
                 "larger trainer.batch_size (more computation per exchange)\n",
                 static_cast<long long>(c.state().epoch), (total_.comm - total_.wait) / n,
                 total_.compute / n, world_);
  }

  void print_totals() const {
    const double n = static_cast<double>(total_.steps);
    std::string per_rank;
    for (double ms : rank_compute_) per_rank += (per_rank.empty() ? "" : ", ") + fmt_ms(ms / n);
    std::fprintf(stderr,
                 "ddp: %d ranks, %lld all-reduced steps in %zu bucket(s) of %lld floats max, %lld "
                 "gradient all-reduces (%zu bucket(s) by exchange, %.1f started during backward "
                 "per step): per step compute %.3f ms, comm %.3f ms (of which wait %.3f ms); "
                 "%lld barrier(s)\n"
                 "ddp: compute per step by rank: %s ms\n",
                 world_, static_cast<long long>(total_.steps), grad_buckets_.size(),
                 static_cast<long long>(max_bucket_numel_), static_cast<long long>(all_reduces_),
                 exchanged_buckets_, total_.early / n, total_.compute / n, total_.comm / n,
                 total_.wait / n, static_cast<long long>(barriers_), per_rank.c_str());
  }

  // What the bench and the tests compare: this rank's optimizer state, sharded or not.
  void print_state_bytes(wick::Context& c) const {
    std::int64_t n = 0;
    for (const auto& name : c.optimizer_names())
      n += wick_ddp::OptimizerShards::state_bytes(c.optimizer(name));
    std::fprintf(
        stderr, "ddp: rank %d holds %lld bytes of optimizer state (%s)\n", rank_,
        static_cast<long long>(n),
        !zero_ ? "not sharded"
               : (shard_gradients_ ? "sharded, gradients reduced to their owners" : "sharded"));
  }

  struct Times {
    double compute = 0, comm = 0, wait = 0, early = 0;
    std::int64_t steps = 0;
  };
  struct Slot {
    std::size_t bucket = 0, index = 0;
  };

  void setup(wick::Context& c) {
    auto& st = c.state();
    world_ = static_cast<int>(st.num_processes);
    rank_ = static_cast<int>(st.rank);
    agreed_stop_ = hook_stop_ = false;
    comm_noticed_ = false;
    window_ = total_ = {};
    barriers_ = all_reduces_ = 0;
    remove_grad_hooks();
    zero_.reset();
    c.set_data_parallel(nullptr);
    if (world_ <= 1) return;  // one process: nothing to do, every hook stays cheap
    // Several optimizers ([optimizers.NAME]): every optimizer's step reduces the whole model's
    // gradients, after backward (no overlap: a batch may run several backward passes). Reducing
    // a gradient already reduced adds the same value on every rank, so each optimizer steps with
    // the average over ranks of all local contributions so far, as one process would.
    overlap_active_ = overlap_ && c.optimizer_names().size() == 1;
    auto store = wick::rendezvous(rank_, world_, timeout_, "wick", "ddp");
    const torch::Device dev(c.run().device.str());
    if (dev.is_cuda())
      pg_ = wick::nccl_group(store, rank_, world_, timeout_, "ddp");
    else
      pg_ = wick::gloo_group(store, rank_, world_, timeout_);
    device_ = dev;
    exchange_ = exchange_mb_ > 0 && world_ == 2 && dev.is_cpu();
    exchanged_buckets_ = 0;

    auto& model = c.model();
    const std::int64_t cap = mib_to_bytes(bucket_mb_);
    std::vector<at::Tensor> buffers;
    for (auto& t : model.buffers()) buffers.push_back(t.detach());
    buffer_buckets_ = make_buckets(buffers, cap, cap);
    if (broadcast_) {
      // Every rank starts from rank 0's weights (and buffers such as batch-norm statistics).
      std::vector<at::Tensor> params;
      for (auto& t : model.parameters()) params.push_back(t.detach());
      auto buckets = make_buckets(params, cap, cap);
      broadcast(buckets);
      broadcast(buffer_buckets_);
    }

    // Reverse order: backward produces the last layers' gradients first.
    std::vector<at::Tensor> params;
    names_.clear();
    for (auto& np : model.named_parameters())
      if (np.value().requires_grad()) {
        params.push_back(np.value());
        names_.push_back(np.key());
      }
    if (params.empty())
      throw std::runtime_error(
          "ddp: the model has no trainable parameters, so there is nothing to all-reduce; "
          "remove [hooks.ddp] or leave some parameters trainable");
    std::reverse(params.begin(), params.end());
    std::reverse(names_.begin(), names_.end());
    std::vector<int> owners;
    if (shard_optimizer_) {
      if (shard_gradients_ && c.optimizer_names().size() > 1)
        throw std::runtime_error(
            "ddp: shard_gradients = true needs one optimizer (several optimizers reduce the same "
            "gradients once per step each, which reducing to owners cannot repeat); set "
            "shard_gradients = false (the optimizer state stays sharded)");
      zero_ = std::make_unique<wick_ddp::OptimizerShards>(comm(), params);
      // A parameter split between owners has its gradient all-reduced (owner -1).
      for (const auto& t : params) owners.push_back(zero_->whole_owner(t));
    }
    grad_buckets_ = make_buckets(params, mib_to_bytes(first_bucket_mb_), cap,
                                 shard_gradients_ ? &owners : nullptr);
    max_bucket_numel_ = 0;
    slot_.assign(params.size(), Slot{});
    ready_.assign(params.size(), 0);
    for (std::size_t bi = 0; bi < grad_buckets_.size(); ++bi) {
      auto& b = grad_buckets_[bi];
      max_bucket_numel_ = std::max(max_bucket_numel_, b.numel);
      for (std::size_t k = 0; k < b.ids.size(); ++k) slot_[b.ids[k]] = Slot{bi, k};
    }
    const std::int64_t trailer_len = 2 + world_;
    rank_compute_.assign(static_cast<std::size_t>(world_), 0.0);
    for (std::size_t i = 0; i < grad_buckets_.size(); ++i) {
      auto& b = grad_buckets_[i];
      // With gradients reduced to owners the trailer, which every rank needs, travels alone.
      const std::int64_t extra =
          i + 1 == grad_buckets_.size() && !shard_gradients_ ? trailer_len : 0;
      b.allocate(extra);
      // Decided by size alone, so that every rank uses the same collective for each bucket.
      b.exchange = exchange_ && b.owner < 0 &&
                   (b.numel + extra) * static_cast<std::int64_t>(b.flat.element_size()) <=
                       mib_to_bytes(exchange_mb_);
      if (b.exchange) {
        b.peer = {torch::empty_like(b.flat)};
        ++exchanged_buckets_;
      }
    }
    const auto& last = grad_buckets_.back();
    trailer_ = shard_gradients_ ? torch::zeros({trailer_len}, last.flat.options())
                                : last.flat.narrow(0, last.numel, trailer_len);
    trailer_io_ = {trailer_};
    trailer_host_ = torch::empty({trailer_len}, torch::kDouble);
    if (overlap_active_ && grad_buckets_.size() > 1) {
      // Holding the accumulators keeps them (and the hooks on them) for every later graph.
      for (std::size_t i = 0; i < params.size(); ++i) {
        auto acc = torch::autograd::impl::grad_accumulator(params[i]);
        if (!acc) continue;  // not a leaf: its bucket is packed in the optimizer_step stage
        const auto key = acc->add_post_hook(std::make_unique<GradReady>(this, i));
        hooks_.emplace_back(std::move(acc), key);
      }
    }
    begin_step();

    ctx_ = &c;
    c.set_data_parallel(this);
  }

  // ---- wick::DataParallelStrategy, installed on the Context for the trainer and other hooks
  // The weights are replicated; sharded optimizer state is gathered to rank 0 for a save.
  void gather_whole(Whole what) override {
    if (what == Whole::training_state && zero_ && gathered_++ == 0) zero_->gather_for_save();
  }
  void release_whole(Whole what) noexcept override {
    if (what == Whole::training_state && zero_ && --gathered_ == 0) zero_->release_after_save();
  }
  bool sharded() const override { return zero_ != nullptr; }
  std::vector<wick::MemoryRow> memory_rows(const std::vector<wick::ParamBytes>& trainable,
                                           std::int64_t other_bytes, int ranks) const override {
    return wick_ddp::memory_rows(trainable, other_bytes, ranks);
  }
  void all_reduce_sum(at::Tensor& t) override { sum_host_tensor(t); }
  void barrier() override {
    wait(pg_->barrier(), "barrier");
    ++barriers_;
  }
  bool agree_stop(bool local, bool epoch_end) override {
    if (epoch_end) {
      // [a hook's stop request, any stop request (a stop signal's too)] over the ranks.
      auto flags =
          torch::tensor({ctx_->stop_requested() ? 1.0 : 0.0, local ? 1.0 : 0.0}, torch::kDouble);
      sum_host_tensor(flags);
      hook_stop_ = hook_stop_ || flags[0].item<double>() > 0;
      agreed_stop_ = agreed_stop_ || flags[1].item<double>() > 0;
    }
    // A hook's request elsewhere stops this rank's fit too; a stop signal is the trainer's.
    if (hook_stop_ && !ctx_->stop_requested()) ctx_->request_stop("stop requested by another rank");
    return agreed_stop_;
  }

  void remove_grad_hooks() {
    for (auto& [acc, key] : hooks_) acc->del_post_hook(key);
    hooks_.clear();
  }

  // Clears the per-step state. Works started for a step whose optimizer_step stage never ran
  // on this rank are waited for first, so that no collective is left half done.
  void begin_step() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& b : grad_buckets_) {
      for (auto* w : {&b.work, &b.recv}) {
        if (!*w) continue;
        try {
          (*w)->wait(timeout_);
        } catch (const c10::Error&) {
        }
        w->reset();
      }
      b.pending = b.tensors.size();
    }
    std::fill(ready_.begin(), ready_.end(), 0);
    next_start_ = 0;
    early_ = 0;
    twice_ = kNone;
  }

  // Starts, in index order, the buckets whose gradients are all packed, except the last one
  // (it carries the trailer and starts in the optimizer_step stage). Caller holds mu_.
  void start_ready_buckets() {
    while (next_start_ + 1 < grad_buckets_.size() && grad_buckets_[next_start_].pending == 0) {
      start(grad_buckets_[next_start_]);
      ++next_start_;
      ++early_;
    }
  }

  void start(Bucket& b) {
    ++all_reduces_;
    try {
      if (b.exchange) {
        // Receive posted first, so that the peer's data lands in place as soon as it comes.
        const int peer = 1 - rank_;
        const int tag = static_cast<int>(&b - grad_buckets_.data());
        b.recv = pg_->recv(b.peer, peer, tag);
        b.work = pg_->send(b.io, peer, tag);
        return;
      }
      if (b.owner >= 0) {
        c10d::ReduceOptions o;
        o.rootRank = b.owner;
        b.work = pg_->reduce(b.io, o);
        return;
      }
      b.work = pg_->allreduce(b.io);
    } catch (const std::exception& e) {  // Gloo sends at once: a dead peer fails here
      comm_failed(b.exchange ? "gradient exchange" : "gradient all-reduce", e);
    }
  }

  // Waits for a bucket's all-reduce; the bucket then holds the sum over ranks.
  void finish(Bucket& b) {
    wait(b.work, b.exchange ? "gradient send" : "gradient all-reduce");
    b.work.reset();
    if (b.recv) {
      wait(b.recv, "gradient receive");
      b.recv.reset();
      // Both ranks add the same two numbers (a + b == b + a): they stay equal bit for bit.
      b.flat.add_(b.peer.front());
    }
  }

  // Waits for a collective.
  void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* what) {
    try {
      w->wait(timeout_);
    } catch (const std::exception& e) {
      comm_failed(what, e);
    }
  }

  // c10d's or Gloo's error (c10d's with its C++ backtrace) as one line that says what failed,
  // which rank is likely gone and what bounds the wait.
  [[noreturn]] void comm_failed(const char* what, const std::exception& e) const {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    throw std::runtime_error(
        std::string("ddp: ") + what + " on rank " + std::to_string(rank_) +
        " failed: " + (c10_error ? c10_error->what_without_backtrace() : e.what()) + " (" +
        // Of two ranks the culprit is known; Gloo's message names a peer's address.
        (world_ == 2 ? "rank " + std::to_string(1 - rank_) + ", the other rank,"
                     : std::string("another rank")) +
        " died or stalled; timeout_s = " + std::to_string(timeout_.count() / 1000) +
        " s bounds how long ranks wait for each other)");
  }

  // How zero.hpp's code reaches the ranks: this hook's group and its wait.
  wick_ddp::Comm comm() {
    return {pg_, device_, rank_, world_,
            [this](const c10::intrusive_ptr<c10d::Work>& w, const char* what) { wait(w, what); }};
  }
  void sum_host_tensor(at::Tensor& t) { wick_ddp::all_reduce_host(comm(), t); }

  void broadcast(std::vector<Bucket>& buckets) {
    for (auto& b : buckets) {
      if (!b.flat.defined()) b.allocate(0);
      for (std::size_t i = 0; i < b.tensors.size(); ++i) pack_one(b, i, false);
      wait(pg_->broadcast(b.io), "broadcast from rank 0");
      torch::NoGradGuard ng;
      for (std::size_t i = 0; i < b.tensors.size(); ++i) b.tensors[i].copy_(b.views[i]);
    }
  }
  void broadcast_buffers() {
    if (pg_) broadcast(buffer_buckets_);
  }

  static std::int64_t mib_to_bytes(double mb) {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(mb * 1024 * 1024));
  }

  // Copies a bucket's i-th tensor (its gradient when grads) into the flat buffer.
  static void pack_one(Bucket& b, std::size_t i, bool grads) {
    const at::Tensor& src = grads ? b.tensors[i].grad() : b.tensors[i];
    if (src.defined())
      b.views[i].copy_(src.detach());
    else
      b.views[i].zero_();  // a parameter unused on this rank contributes nothing
  }

  bool reduce_gradients(wick::Context& c, const wick::Next& next) {
    if (!pg_ || !c.state().is_accum_boundary()) return next();
    const auto t0 = Clock::now();
    const double compute = ms_between(step_start_, t0);
    std::unique_lock<std::mutex> lock(mu_);
    if (twice_ != kNone)
      throw std::runtime_error(
          "ddp: parameter '" + names_[twice_] +
          "' received its gradient twice in one backward stage, after its bucket was packed; "
          "with more than one backward pass per micro-batch set [hooks.ddp] overlap = false");
    const double early = static_cast<double>(early_);
    for (; next_start_ < grad_buckets_.size(); ++next_start_) {
      auto& b = grad_buckets_[next_start_];
      for (std::size_t k = 0; k < b.tensors.size(); ++k)
        if (!ready_[b.ids[k]]) pack_one(b, k, true);
      if (next_start_ + 1 == grad_buckets_.size()) {
        // Trailer: [this rank's stop flag, compute ms per rank (ours in our slot)].
        double* t = trailer_host_.data_ptr<double>();
        std::fill(t, t + trailer_host_.numel(), 0.0);
        t[0] = c.stop_requested() ? 1.0 : 0.0;
        t[1] = wick::interrupt_requested() ? 1.0 : 0.0;
        t[2 + rank_] = compute;
        trailer_.copy_(trailer_host_);
      }
      start(b);
    }
    if (shard_gradients_) {
      ++all_reduces_;
      wait(pg_->allreduce(trailer_io_), "stop flag and timings all-reduce");
    }
    for (auto& b : grad_buckets_) finish(b);
    lock.unlock();

    // Averaged while copied back: one pass over the gradients.
    const double inv = 1.0 / world_;
    for (auto& b : grad_buckets_) {
      for (std::size_t i = 0; i < b.tensors.size(); ++i) {
        auto& p = b.tensors[i];
        if (b.owner >= 0 && b.owner != rank_) {
          p.mutable_grad() = at::Tensor();  // another rank's share: its owner steps it
          continue;
        }
        if (p.grad().defined() && p.grad().is_contiguous() && p.grad().sizes() == p.sizes())
          at::mul_out(p.mutable_grad(), b.views[i], inv);
        else
          p.mutable_grad() = b.views[i] * inv;
      }
    }
    trailer_host_.copy_(trailer_);
    const double* v = trailer_host_.data_ptr<double>();
    if (v[0] > 0) hook_stop_ = true;
    if (v[0] > 0 || v[1] > 0) agreed_stop_ = true;
    double slowest = 0;
    for (int r = 0; r < world_; ++r) {
      slowest = std::max(slowest, v[2 + r]);
      rank_compute_[static_cast<std::size_t>(r)] += v[2 + r];
    }
    const double comm = ms_between(t0, Clock::now());
    const double wait = std::min(comm, std::max(0.0, slowest - compute));
    for (Times* t : {&window_, &total_}) {
      t->compute += compute;
      t->comm += comm;
      t->wait += wait;
      t->early += early;
      ++t->steps;
    }
    begin_step();
    const double n = static_cast<double>(window_.steps);
    c.log("ddp/compute_ms", window_.compute / n);
    c.log("ddp/comm_ms", window_.comm / n);
    c.log("ddp/wait_ms", window_.wait / n);
    if (!zero_) return next();
    zero_->before_step(c.optimizer());
    const bool stepped = next();
    zero_->after_step(c.optimizer());  // every rank, stepped or not: collectives stay in step
    return stepped;
  }

  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  double bucket_mb_, first_bucket_mb_;
  std::chrono::milliseconds timeout_;
  bool broadcast_, overlap_;
  bool overlap_active_ = false;  // overlap_, and one optimizer
  double exchange_mb_;
  bool exchange_ = false;
  std::size_t exchanged_buckets_ = 0;
  int world_ = 1, rank_ = 0;
  c10::intrusive_ptr<wick::compat::CommBackend> pg_;
  torch::Device device_{torch::kCPU};
  std::vector<Bucket> grad_buckets_, buffer_buckets_;
  std::int64_t max_bucket_numel_ = 0;
  bool shard_optimizer_, shard_gradients_;
  std::unique_ptr<wick_ddp::OptimizerShards> zero_;
  int gathered_ = 0;                    // nested gather_whole(training_state) calls
  at::Tensor trailer_, trailer_host_;   // the last bucket's trailer, and a CPU double copy
  std::vector<at::Tensor> trailer_io_;  // {trailer_}, all-reduced alone with sharded gradients
  std::vector<double> rank_compute_;    // sum over steps of each rank's compute ms
  bool agreed_stop_ = false;  // the ranks stop: a stop requested, or a stop signal, on any
  bool hook_stop_ = false;    // a hook's stop request on some rank among them
  bool comm_noticed_ = false;
  wick::Context* ctx_ = nullptr;
  std::int64_t barriers_ = 0, all_reduces_ = 0;
  Clock::time_point step_start_ = Clock::now();
  Times window_, total_;
  // Overlap state: hooks on the gradient accumulators, where each parameter sits, which
  // parameters are packed this step, the next bucket to start. mu_ guards them against
  // LibTorch's autograd thread for a GPU (grad_ready), which may run a backward pass.
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, std::uintptr_t>> hooks_;
  std::vector<Slot> slot_;
  std::vector<std::string> names_;  // of the gradient tensors, in bucket order (for errors)
  std::vector<char> ready_;
  std::size_t next_start_ = 0, early_ = 0, twice_ = kNone;
  std::atomic<bool> armed_{false};
  std::mutex mu_;
};

torch::autograd::variable_list GradReady::operator()(const torch::autograd::variable_list& outputs,
                                                     const torch::autograd::variable_list&) {
  ddp->grad_ready(index);
  return outputs;
}

}  // namespace

WICK_PLUGIN(Ddp, wick::PluginDef("ddp", "2.0.0",
                                 "Data-parallel training on c10d (Gloo; NCCL on CUDA): "
                                 "gradient all-reduce overlapped with backward, metric reduction, "
                                 "stop agreement")
                     .one_instance()
                     .order(-7)
                     .param_float("bucket_mb", 25.0,
                                  "gradient bucket size in MiB; fewer buckets, fewer all-reduces")
                     .param_float("first_bucket_mb", 1.0,
                                  "size of the first gradient bucket (the last layers) in MiB; "
                                  "small, so that its all-reduce starts early in backward")
                     .param_bool("overlap", true,
                                 "start each bucket's all-reduce as soon as backward has filled it")
                     .param_float("two_rank_exchange_mb", 0.25,
                                  "with two ranks on Gloo, buckets up to this size (MiB) are "
                                  "all-reduced by one send and one receive each way and an add "
                                  "rather than Gloo's ring; 0: never")
                     .param_float("timeout_s", 300.0,
                                  "seconds before a collective (or the rendezvous) gives up on a "
                                  "peer (0.001 to 604800)")
                     .param_bool("broadcast_parameters", true,
                                 "start every rank from rank 0's parameters and buffers")
                     .param_bool("shard_optimizer", false,
                                 "ZeRO stage 1: each rank keeps and steps the optimizer state of "
                                 "its share of the parameters; parameters are broadcast from "
                                 "their owners after each step")
                     .param_bool("shard_gradients", false,
                                 "ZeRO stage 2 (with shard_optimizer): gradients are reduced to "
                                 "their owner instead of all-reduced"))
