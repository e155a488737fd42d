// Data-parallel training on torch.distributed's c10d: a TCPStore rendezvous and a Gloo process
// group (NCCL for CUDA devices when wick is built with it), set up from torchrun's
// environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; `wick launch` sets them).
//
// What it does, and where:
// - before_fit: joins the process group, broadcasts rank 0's parameters and buffers, installs
//   the trainer's all-reduce (validation metrics), stop agreement and barrier (checkpoints).
// - optimizer_step stage, order -7: after grad_accum's boundary check (-10), before loss-scale
//   unscaling (-5) and clipping (0), so it only runs on accumulation boundaries. Gradients are
//   copied into flat buckets (bucket_mb each), every bucket's all-reduce is started, then all
//   are awaited and the averaged gradients copied back: one all-reduce per bucket per
//   optimizer step, usually one in all.
// - Stop agreement without extra messages per step: the last bucket carries a trailer,
//   [stop flag, compute ms of rank 0 .. world-1]. A stop requested on any rank before a step's
//   all-reduce stops every rank after that step; one requested later rides on the next
//   all-reduce. After each epoch one small all-reduce agrees on stops requested at epoch end
//   (early stopping, main-process-only hooks). The compute times give each rank its wait.
// - Checkpoints: hooks that write shared files call Trainer::barrier() on every rank (a no-op
//   without this plugin); rank 0 writes, the others wait, so nobody runs ahead of a half-
//   written checkpoint. Resuming needs the same world size (the data shards depend on it).
// - Not supported: a CancelStep / CancelEpoch thrown on one rank alone, and nan_policy "skip"
//   (both make ranks skip collectives the others run); they end in a timeout, not a hang.
// - Timings (metrics, averaged over the log window): ddp/compute_ms (before_step to the
//   all-reduce: forward, backward, hooks), ddp/comm_ms (pack, all-reduce, unpack),
//   ddp/wait_ms (the part of comm_ms spent waiting for the slowest rank's compute).
//   Logged on each all-reduced step as the mean since the last step record.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef WICK_DDP_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <wick/context.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>
#include <wick/trainer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::int64_t env_int(const char* name, std::int64_t def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : def;
}

// Consecutive tensors of one dtype and device, laid out in one flat buffer.
struct Bucket {
  std::vector<at::Tensor> tensors;
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;  // of the tensors (the buffer may hold a trailer beyond it)
  at::Tensor flat;
};

std::vector<Bucket> make_buckets(const std::vector<at::Tensor>& ts, std::int64_t max_bytes) {
  std::vector<Bucket> out;
  for (const auto& t : ts) {
    const std::int64_t bytes = t.numel() * static_cast<std::int64_t>(t.element_size());
    bool fits =
        !out.empty() && out.back().tensors.front().scalar_type() == t.scalar_type() &&
        out.back().tensors.front().device() == t.device() &&
        (out.back().numel * static_cast<std::int64_t>(t.element_size()) + bytes <= max_bytes);
    if (!fits) out.emplace_back();
    auto& b = out.back();
    b.tensors.push_back(t);
    b.offsets.push_back(b.numel);
    b.numel += t.numel();
  }
  return out;
}

class Ddp : public wick::Hook {
 public:
  explicit Ddp(const wick::Params& p)
      : bucket_mb_(p.get_float("bucket_mb")),
        timeout_(std::chrono::milliseconds(
            static_cast<std::int64_t>(p.get_float("timeout_s") * 1000.0))),
        broadcast_(p.get_bool("broadcast_parameters")) {
    if (bucket_mb_ <= 0) throw p.error("bucket_mb", "must be > 0 (megabytes per bucket)");
    if (p.get_float("timeout_s") <= 0) throw p.error("timeout_s", "must be > 0 seconds");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) { setup(c); });
    r.on(wick::Point::before_step, [this](wick::Context& c) {
      if (c.state().training()) step_start_ = Clock::now();
    });
    // Buffers (batch-norm statistics) are updated by each rank's own batches; validation and
    // the final model use rank 0's, as PyTorch's DDP does with broadcast_buffers.
    r.on(wick::Point::before_valid, [this](wick::Context&) { broadcast_buffers(); });
    r.on(wick::Point::after_fit, [this](wick::Context&) { broadcast_buffers(); });
    r.stage(wick::Stage::optimizer_step,
            [this](wick::Context& c, wick::Next next) { return reduce_gradients(c, next); });
    r.require_after(wick::Stage::optimizer_step, "grad_accum",
                    "gradients are all-reduced once per optimizer step, after accumulation");
    // The timings logged each step are means over the steps since the last step record.
    r.on_record([this](const wick::Record& rec) {
      if (rec.kind == wick::Record::Kind::step) window_ = {};
    });
    r.on(wick::Point::after_fit, [this](wick::Context& c) {
      if (pg_ && c.state().is_main_process() && total_.steps > 0)
        std::fprintf(stderr,
                     "ddp: %d ranks, %lld all-reduced steps in %zu bucket(s) of %lld floats "
                     "max: per step compute %.3f ms, comm %.3f ms (of which wait %.3f ms); "
                     "%lld barrier(s)\n",
                     world_, static_cast<long long>(total_.steps), grad_buckets_.size(),
                     static_cast<long long>(max_bucket_numel_), total_.compute / total_.steps,
                     total_.comm / total_.steps, total_.wait / total_.steps,
                     static_cast<long long>(barriers_));
    });
  }

 private:
  struct Times {
    double compute = 0, comm = 0, wait = 0;
    std::int64_t steps = 0;
  };

  void setup(wick::Context& c) {
    auto& st = c.state();
    world_ = static_cast<int>(st.num_processes);
    rank_ = static_cast<int>(st.rank);
    agreed_stop_ = false;
    window_ = total_ = {};
    barriers_ = 0;
    if (world_ <= 1) return;  // one process: nothing to do, every hook stays cheap
    if (c.trainer().options().nan_policy == "skip")
      throw wick::ConfigError(
          "[hooks.ddp] needs every rank to take part in every optimizer step, but "
          "trainer.nan_policy = \"skip\" skips steps on one rank alone; use \"error\"");
    const char* addr = std::getenv("MASTER_ADDR");
    const std::int64_t port = env_int("MASTER_PORT", -1);
    if (!addr || port <= 0 || port > 65535)
      throw wick::ConfigError(
          "ddp: WORLD_SIZE is " + std::to_string(world_) +
          " but MASTER_ADDR / MASTER_PORT are not set; start the ranks with wick launch");

    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(port);
    so.isServer = rank_ == 0;
    so.numWorkers = static_cast<std::size_t>(world_);
    so.waitWorkers = true;
    so.timeout = timeout_;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(addr, so);
    auto store = c10::make_intrusive<c10d::PrefixStore>("wick", tcp);

    const torch::Device dev(c.run().device.empty() ? "cpu" : c.run().device);
    if (dev.is_cuda()) {
#ifdef WICK_DDP_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = timeout_;
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank_, world_, o);
#else
      throw wick::ConfigError(
          "ddp: trainer.device is " + dev.str() +
          " but this wick was built without NCCL; build against a CUDA LibTorch or train on cpu");
#endif
    } else {
      auto o = c10d::ProcessGroupGloo::Options::create(timeout_);
      // Loopback runs bind Gloo to 127.0.0.1; otherwise GLOO_SOCKET_IFNAME or this host's name.
      const std::string a = addr;
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (a == "localhost" || a.rfind("127.", 0) == 0)
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      o->threads = 2;
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank_, world_, o);
    }

    auto& model = c.model();
    std::vector<at::Tensor> buffers;
    for (auto& t : model.buffers()) buffers.push_back(t.detach());
    buffer_buckets_ = make_buckets(buffers, bucket_bytes());
    if (broadcast_) {
      // Every rank starts from rank 0's weights (and buffers such as batch-norm statistics).
      std::vector<at::Tensor> params;
      for (auto& t : model.parameters()) params.push_back(t.detach());
      auto buckets = make_buckets(params, bucket_bytes());
      broadcast(buckets);
      broadcast(buffer_buckets_);
    }

    std::vector<at::Tensor> params;
    for (auto& p : model.parameters())
      if (p.requires_grad()) params.push_back(p);
    if (params.empty()) throw std::runtime_error("ddp: the model has no trainable parameters");
    grad_buckets_ = make_buckets(params, bucket_bytes());
    max_bucket_numel_ = 0;
    for (auto& b : grad_buckets_) max_bucket_numel_ = std::max(max_bucket_numel_, b.numel);
    trailer_ = 1 + world_;
    for (std::size_t i = 0; i < grad_buckets_.size(); ++i) {
      auto& b = grad_buckets_[i];
      const std::int64_t extra = i + 1 == grad_buckets_.size() ? trailer_ : 0;
      b.flat = torch::empty({b.numel + extra}, b.tensors.front().options().requires_grad(false));
    }

    auto& trainer = c.trainer();
    device_ = dev;
    trainer.set_all_reduce([this](at::Tensor& t) { sum_host_tensor(t); });
    trainer.set_barrier([this] {
      wait(pg_->barrier(), "barrier");
      ++barriers_;
    });
    wick::Context* ctx = &c;
    trainer.set_stop_agreement([this, ctx](bool local, bool epoch_end) {
      if (epoch_end) {
        auto flag = torch::full({1}, local ? 1.0 : 0.0, torch::kDouble);
        sum_host_tensor(flag);
        agreed_stop_ = agreed_stop_ || flag.item<double>() > 0;
      }
      if (agreed_stop_ && !local) ctx->request_stop("stop requested by another rank");
      return agreed_stop_;
    });
  }

  // Waits for a collective; c10d's error (with its C++ backtrace) becomes one line that says
  // what was being waited for and what to do.
  void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* what) {
    try {
      w->wait(timeout_);
    } catch (const c10::Error& e) {
      throw std::runtime_error(
          std::string("ddp: ") + what + " on rank " + std::to_string(rank_) +
          " failed: " + e.what_without_backtrace() +
          " (another rank died or stalled; timeout_s = " + std::to_string(timeout_.count() / 1000) +
          " s bounds how long ranks wait for each other)");
    }
  }

  // Sums a small CPU tensor over ranks (through the device when the backend needs it there).
  void sum_host_tensor(at::Tensor& t) {
    if (device_.is_cpu()) {
      std::vector<at::Tensor> v{t};
      wait(pg_->allreduce(v), "all-reduce");
      return;
    }
    std::vector<at::Tensor> v{t.to(device_)};
    wait(pg_->allreduce(v), "all-reduce");
    t.copy_(v[0].cpu());
  }

  void broadcast(std::vector<Bucket>& buckets) {
    for (auto& b : buckets) {
      pack(b, false);
      std::vector<at::Tensor> v{b.flat};
      wait(pg_->broadcast(v), "broadcast from rank 0");
      torch::NoGradGuard ng;
      for (std::size_t i = 0; i < b.tensors.size(); ++i)
        b.tensors[i].copy_(
            b.flat.narrow(0, b.offsets[i], b.tensors[i].numel()).view_as(b.tensors[i]));
    }
  }
  void broadcast_buffers() {
    if (pg_) broadcast(buffer_buckets_);
  }

  std::int64_t bucket_bytes() const {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(bucket_mb_ * 1024 * 1024));
  }

  // Copies a bucket's tensors (their grads when grads) into its flat buffer.
  static void pack(Bucket& b, bool grads) {
    if (!b.flat.defined())
      b.flat = torch::empty({b.numel}, b.tensors.front().options().requires_grad(false));
    for (std::size_t i = 0; i < b.tensors.size(); ++i) {
      auto dst = b.flat.narrow(0, b.offsets[i], b.tensors[i].numel());
      const at::Tensor& src = grads ? b.tensors[i].grad() : b.tensors[i];
      if (src.defined())
        dst.copy_(src.detach().reshape({-1}));
      else
        dst.zero_();  // a parameter unused on this rank contributes nothing
    }
  }

  bool reduce_gradients(wick::Context& c, const wick::Next& next) {
    if (!pg_ || !c.state().is_accum_boundary()) return next();
    const auto t0 = Clock::now();
    const double compute = ms_between(step_start_, t0);
    for (auto& b : grad_buckets_) pack(b, true);
    // Trailer: [this rank's stop flag, compute ms per rank (ours in our slot)].
    auto& last = grad_buckets_.back();
    auto trailer = last.flat.narrow(0, last.numel, trailer_);
    trailer.zero_();
    trailer[0] = c.stop_requested() ? 1.0 : 0.0;
    trailer[1 + rank_] = compute;

    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    works.reserve(grad_buckets_.size());
    for (auto& b : grad_buckets_) {
      std::vector<at::Tensor> v{b.flat};
      works.push_back(pg_->allreduce(v));
    }
    for (auto& w : works) wait(w, "gradient all-reduce");

    const double inv = 1.0 / world_;
    for (auto& b : grad_buckets_) {
      auto g = b.flat.narrow(0, 0, b.numel);
      g.mul_(inv);
      for (std::size_t i = 0; i < b.tensors.size(); ++i) {
        auto& p = b.tensors[i];
        auto src = g.narrow(0, b.offsets[i], p.numel()).view(p.sizes());
        if (p.grad().defined())
          p.mutable_grad().copy_(src);
        else
          p.mutable_grad() = src.clone();
      }
    }
    auto tr = trailer.to(torch::kCPU, torch::kDouble).contiguous();
    const double* v = tr.data_ptr<double>();
    if (v[0] > 0) agreed_stop_ = true;
    double slowest = 0;
    for (int r = 0; r < world_; ++r) slowest = std::max(slowest, v[1 + r]);
    const double comm = ms_between(t0, Clock::now());
    const double wait = std::min(comm, std::max(0.0, slowest - compute));
    for (Times* t : {&window_, &total_}) {
      t->compute += compute;
      t->comm += comm;
      t->wait += wait;
      ++t->steps;
    }
    const double n = static_cast<double>(window_.steps);
    c.log("ddp/compute_ms", window_.compute / n);
    c.log("ddp/comm_ms", window_.comm / n);
    c.log("ddp/wait_ms", window_.wait / n);
    return next();
  }

  double bucket_mb_;
  std::chrono::milliseconds timeout_;
  bool broadcast_;
  int world_ = 1, rank_ = 0;
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  torch::Device device_{torch::kCPU};
  std::vector<Bucket> grad_buckets_, buffer_buckets_;
  std::int64_t max_bucket_numel_ = 0, trailer_ = 0;
  bool agreed_stop_ = false;
  std::int64_t barriers_ = 0;
  Clock::time_point step_start_ = Clock::now();
  Times window_, total_;
};

}  // namespace

WICK_PLUGIN(Ddp, wick::PluginDef("ddp", "1.0.0",
                                 "Data-parallel training on c10d (Gloo; NCCL on CUDA): "
                                 "gradient all-reduce, metric reduction, stop agreement")
                     .order(-7)
                     .param_float("bucket_mb", 25.0,
                                  "gradient bucket size in MiB; fewer buckets, fewer all-reduces")
                     .param_float("timeout_s", 300.0,
                                  "seconds before a collective (or the rendezvous) gives up on a "
                                  "peer")
                     .param_bool("broadcast_parameters", true,
                                 "start every rank from rank 0's parameters and buffers"))
