// The loop: fit and validate, the phases of an epoch and of a step.
#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <optional>

#include "cuda/cuda_support.hpp"
#include "loop/flops.hpp"
#include "loop/model_parts.hpp"
#include "loop/trainer_impl.hpp"
#include "optim/optimizers.hpp"
#include "wick/config.hpp"
#include "wick/outputs.hpp"
#include "wick/params.hpp"
#include "wick/sha256.hpp"
#include "wick/system.hpp"

namespace wick {

namespace fs = std::filesystem;

namespace {

// The first stop signal's number (0: none) and how many have come.
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_count{0};

void on_stop_signal(int sig) {
  // A second signal: the user (or the scheduler) wants out now.
  if (g_stop_count.fetch_add(1) >= 1) _exit(128 + sig);
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}

// SIGINT (Ctrl-C), SIGTERM (preemption: SLURM, Kubernetes, docker stop), SIGHUP (the terminal
// went away) and SIGUSR1 (SLURM's warning before a job's end) all ask for a stop at the next
// step boundary, so that the cancel checkpoint and a truthful summary.json get written.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};

// Installs the stop-signal handlers for the duration of a fit and restores the previous ones.
class StopSignalScope {
 public:
  StopSignalScope() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < std::size(kStopSignals); ++i)
      sigaction(kStopSignals[i], &sa, &old_[i]);
  }
  ~StopSignalScope() {
    for (std::size_t i = 0; i < std::size(kStopSignals); ++i)
      sigaction(kStopSignals[i], &old_[i], nullptr);
  }

 private:
  struct sigaction old_[std::size(kStopSignals)]{};
};

// "interrupted (SIGINT)", "terminated (SIGTERM)", ...: summary.json's stop_reason.
std::string stop_signal_reason(int sig) {
  switch (sig) {
    case SIGTERM:
      return "terminated (SIGTERM)";
    case SIGHUP:
      return "hung up (SIGHUP)";
    case SIGUSR1:
      return "asked to stop (SIGUSR1)";
    default:
      return "interrupted (SIGINT)";
  }
}

struct Interrupted {};

// Whether a scalar loss is finite. On the CPU the value is read in place: item() goes through
// the dispatcher and costs about a microsecond per step (measured by wick_bench); on a GPU it
// is the device sync that nan_policy needs anyway.
bool loss_is_finite(const at::Tensor& loss) {
  if (loss.device().is_cpu() && loss.numel() == 1 && loss.layout() == at::kStrided) {
    if (loss.scalar_type() == at::kFloat) return std::isfinite(*loss.data_ptr<float>());
    if (loss.scalar_type() == at::kDouble) return std::isfinite(*loss.data_ptr<double>());
  }
  return std::isfinite(loss.item<double>());
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// CPU time of the process, all threads: a throughput measure that waiting for a busy
// machine's cores does not distort (summary.json's train_cpu_s).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

torch::Device to_torch(const Device& d) {
  return d.is_cpu() ? torch::Device(torch::kCPU)
                    : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index));
}

}  // namespace

bool interrupt_requested() {
  return g_stop_signal.load(std::memory_order_relaxed) != 0;
}
int interrupt_signal() {
  return g_stop_signal.load(std::memory_order_relaxed);
}
void request_interrupt(int sig) {
  g_stop_signal.store(sig);
  g_stop_count.store(1);
}
void clear_interrupt() {
  g_stop_signal.store(0);
  g_stop_count.store(0);
}

int FitResult::exit_code() const {
  if (signal) return 128 + signal;
  if (status == Status::failed) return config_error ? 2 : 1;
  return 0;
}

const char* to_string(FitResult::Status s) {
  switch (s) {
    case FitResult::Status::completed:
      return "completed";
    case FitResult::Status::cancelled:
      return "cancelled";
    case FitResult::Status::failed:
      return "failed";
  }
  return "?";
}

Trainer::Trainer(TrainerOptions options, std::shared_ptr<Task> task, OptimizerOptions optimizer,
                 RunInfo run)
    : Trainer(std::move(options), std::move(task),
              std::vector<OptimizerOptions>{std::move(optimizer)}, std::move(run)) {}

Trainer::Trainer(TrainerOptions options, std::shared_ptr<Task> task,
                 std::vector<OptimizerOptions> optimizers, RunInfo run)
    : impl_(std::make_unique<Impl>()) {
  auto& I = *impl_;
  I.self = this;
  I.opt = std::move(options);
  I.optim_specs = std::move(optimizers);
  I.task = std::move(task);
  if (!I.task) throw std::invalid_argument("Trainer: no task");
  if (I.opt.threads > 0) at::set_num_threads(static_cast<int>(I.opt.threads));

  Device dev = I.opt.device;
  if (I.opt.auto_device)
    dev = torch::cuda::is_available() ? Device{DeviceType::cuda, -1} : Device{};
  if (dev.is_cuda() && !torch::cuda::is_available())
    throw ConfigError("trainer.device = \"" + dev.str() +
                      "\" but this LibTorch has no CUDA device; use \"cpu\" or \"auto\"");
  I.device = to_torch(dev);

  // The run's facts, as plugins see them.
  I.run = std::move(run);
  I.run.device = dev;
  I.run.seed = I.opt.seed;
  I.run.epochs = I.opt.epochs;
  I.run.max_steps = I.opt.max_steps;
  I.run.batch_size = I.opt.batch_size;
  I.run.valid_batch_size = I.opt.valid_batch_size > 0 ? I.opt.valid_batch_size : I.opt.batch_size;
  I.run.shuffle = I.opt.shuffle;
  I.run.drop_last = I.opt.drop_last;
  I.run.nan_policy = I.opt.nan_policy;
  if (I.run.output_dir.empty()) I.run.output_dir = fs::absolute(I.opt.output_dir).string();

  // Data-parallel ranks come from the launcher's torchrun-style variables.
  if (const char* ws = std::getenv("WORLD_SIZE"))
    I.state.num_processes = std::max(1L, std::atol(ws));
  if (const char* rk = std::getenv("RANK")) I.state.rank = std::atol(rk);
  I.run.world_size = I.state.num_processes;
  I.run.rank = I.state.rank;

  torch::manual_seed(static_cast<std::uint64_t>(I.opt.seed));
  I.model = I.task->model();
  if (!I.model) throw std::runtime_error("task returned no model");
  check_model_parts(*I.model);
  I.model->to(I.device);
  I.train_ds = I.task->train_data();
  if (!I.train_ds) throw std::runtime_error("task returned no training data");
  I.valid_ds = I.task->valid_data();
  // A stream has no size: the config must say how long an epoch is.
  const std::string cfg_at = I.run.config_path.empty() ? "" : I.run.config_path + ": ";
  if (I.train_ds->size() == kUnsized && I.opt.steps_per_epoch <= 0)
    throw ConfigError(cfg_at +
                      "the task's training data is a stream (its size() is wick::kUnsized), so "
                      "an epoch has no end; set trainer.steps_per_epoch to the batches an epoch "
                      "should have");
  if (I.train_ds->size() < 0 && I.train_ds->size() != kUnsized)
    throw std::runtime_error("the task's training data has a negative size (" +
                             std::to_string(I.train_ds->size()) +
                             "); a stream's size() returns wick::kUnsized");
  if (I.valid_ds && I.valid_ds->size() < 0)
    throw ConfigError(cfg_at +
                      "the task's validation data has no size (a stream); validation runs "
                      "over a finite data set: give valid_data() one, or return nullptr");
  if (I.train_ds->size() == 0)
    throw ConfigError(cfg_at + "the task's training data is empty (0 samples)");
  if (I.train_batches() == 0) {
    const std::int64_t n = I.train_ds->size(), w = I.state.num_processes;
    throw ConfigError(
        cfg_at + "an epoch would have no batch: " + std::to_string(n) + " training samples" +
        (w > 1 ? " (" + std::to_string((n + w - 1) / w) + " per rank)" : std::string()) +
        " are fewer than trainer.batch_size = " + std::to_string(I.opt.batch_size) +
        " with drop_last = true; lower batch_size or set drop_last = false");
  }
  I.optimizers = make_optimizers(I.optim_specs, *I.model);
  I.manual = I.task->manual_optimization();
  I.state.epochs = I.opt.epochs;

  // The defaults at the end of each stage chain.
  Impl* impl = &I;
  I.dispatch.set_terminal(Stage::forward, [impl](Context& c) {
    impl->output.pred = impl->task->forward(c, impl->batch);
    return true;
  });
  I.dispatch.set_terminal(Stage::backward, [](Context& c) {
    c.backward_loss().backward();
    return true;
  });
  I.dispatch.set_terminal(Stage::gradients, [impl](Context&) {
    impl->forward_and_loss();
    impl->backward(impl->output.loss, 0);
    return true;
  });
  I.dispatch.set_terminal(Stage::optimizer_step, [impl](Context&) {
    impl->optim().step();
    return true;
  });
  // Gradients are set to none rather than zeroed: less memory traffic, same result.
  I.dispatch.set_terminal(Stage::zero_grad, [impl](Context&) {
    for (auto& group : impl->optim().param_groups())
      for (auto& p : group.params()) p.mutable_grad() = at::Tensor();
    return true;
  });
  I.records.set_sinks(&I.dispatch.record_sinks(), &I.dispatch.rewinds());
}

Trainer::~Trainer() = default;

void Trainer::add_hook(HookEntry entry) {
  impl_->dispatch.add_hook(std::move(entry));
}
const std::vector<HookEntry>& Trainer::hooks() const {
  return impl_->dispatch.hooks();
}
void Trainer::add_metric(MetricEntry entry) {
  if (!entry.metric) throw std::invalid_argument("add_metric: no metric");
  for (const auto& m : impl_->metrics)
    if (m.instance == entry.instance)
      throw ConfigError("two metrics named '" + entry.instance + "'; give one another name");
  const std::string who = "metric '" + entry.instance + "' (plugin '" + entry.plugin + "')";
  impl_->metric_places.emplace_back(who + " on a validation batch", who + " computing its value");
  impl_->metrics.push_back(std::move(entry));
}
const std::vector<MetricEntry>& Trainer::metrics() const {
  return impl_->metrics;
}
namespace {
// Task::connect scheduled as a hook named "task".
struct TaskHook : Hook {
  std::shared_ptr<Task> task;
  explicit TaskHook(std::shared_ptr<Task> t) : task(std::move(t)) {}
  void connect(Registrar& r) override { task->connect(r); }
};
}  // namespace

void Trainer::connect() {
  auto& I = *impl_;
  if (!I.dispatch.connected()) {
    HookEntry e;
    e.hook = std::make_shared<TaskHook>(I.task);
    e.plugin = e.instance = "task";
    I.dispatch.add_hook(std::move(e));
  }
  I.dispatch.connect(I.state.rank);
}
const ScheduleTable& Trainer::schedule() const {
  return impl_->dispatch.table();
}
std::string Trainer::describe() {
  connect();
  return describe_markdown(impl_->dispatch.table());
}
void Trainer::emit_for_benchmark(const std::vector<Point>& points, std::int64_t repeats) {
  connect();
  for (std::int64_t r = 0; r < repeats; ++r)
    for (Point p : points) impl_->dispatch.emit(p);
}

StepState& Trainer::state() {
  return impl_->state;
}
const TrainerOptions& Trainer::options() const {
  return impl_->opt;
}
const RunInfo& Trainer::run() const {
  return impl_->run;
}
Task& Trainer::task() {
  return *impl_->task;
}
torch::nn::Module& Trainer::model() {
  return *impl_->model;
}
torch::optim::Optimizer& Trainer::optimizer() {
  return *impl_->optimizers.front().optimizer;
}
Context& Trainer::context() {
  return impl_->ctx;
}

std::uint64_t Trainer::epoch_seed(std::int64_t epoch) const {
  return wick::epoch_seed(impl_->opt.seed, epoch);
}

std::string Trainer::model_fingerprint() {
  Sha256 h;
  auto feed = [&](const at::Tensor& t) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    h.update(c.data_ptr(), c.numel() * c.element_size());
  };
  for (const auto& p : impl_->model->parameters()) feed(p);
  for (const auto& b : impl_->model->buffers()) feed(b);
  return h.hex();
}

// ---- the loop ----------------------------------------------------------------------------

Sharding Trainer::Impl::sharding() const {
  return {state.num_processes, state.rank};
}

std::int64_t Trainer::Impl::train_batches() const {
  return train_batches(epoch_start, state.num_processes, opt.batch_size, opt.drop_last);
}

std::int64_t Trainer::Impl::train_batches(EpochStart start, std::int64_t world, std::int64_t bs,
                                          bool drop_last) const {
  if (streaming()) return opt.steps_per_epoch;
  const std::int64_t nb = epoch_batches(train_ds->size(), start, world, bs, drop_last);
  return opt.steps_per_epoch > 0 ? std::min(nb, opt.steps_per_epoch) : nb;
}

LoadPlan Trainer::Impl::train_plan(std::int64_t first_batch) {
  LoadPlan p;
  p.ds = train_ds.get();
  p.phase = Phase::train;
  p.seed = opt.seed;
  p.epoch = state.epoch;
  p.first = first_batch;
  p.end = train_batches();
  p.what = "the training data";
  p.pin = device.is_cuda();
  const std::int64_t bs = opt.batch_size;
  if (streaming()) {
    // Running sample numbers, dealt to ranks batch by batch (see wick::kUnsized).
    const std::int64_t e = state.epoch, spe = opt.steps_per_epoch;
    const std::int64_t w = state.num_processes, r = state.rank;
    p.indices = [=](std::int64_t b) {
      return at::arange(((e * spe + b) * w + r) * bs, ((e * spe + b) * w + r + 1) * bs, at::kLong);
    };
    return p;
  }
  at::Tensor order = train_order(opt.seed, state.epoch, train_ds->size(), opt.shuffle, sharding(),
                                 epoch_start.offset);
  const std::int64_t local = order.size(0), first = epoch_start.first_batch;
  p.indices = [order, local, bs, first](std::int64_t b) {
    return order.slice(0, (b - first) * bs, std::min(local, (b - first + 1) * bs));
  };
  return p;
}

Batch Trainer::Impl::to_device(Batch b) const {
  if (device.is_cpu()) return b;
  // From page-locked memory (LoadPlan::pin) on a copy stream: overlapped with the previous
  // step's work still running on the GPU. Predict's inputs have no target (undefined stays so).
  b.input = cuda::to_device_async(b.input, device);
  b.target = cuda::to_device_async(b.target, device);
  return b;
}

double Trainer::Impl::current_lr() const {
  const auto& groups = optimizers.front().optimizer->param_groups();
  return groups.empty() ? 0.0 : groups[0].options().get_lr();
}

// "lr": the first group's of the first optimizer; with several optimizers also "lr/NAME".
void Trainer::Impl::add_lrs(Record& r) const {
  r.values.emplace_back("lr", current_lr());
  if (optimizers.size() < 2) return;
  for (const auto& o : optimizers) {
    const auto& groups = o.optimizer->param_groups();
    if (!groups.empty()) r.values.emplace_back("lr/" + o.name, groups[0].options().get_lr());
  }
}

std::size_t Trainer::Impl::optimizer_index(std::string_view name) const {
  std::string known;
  for (std::size_t i = 0; i < optimizers.size(); ++i) {
    if (optimizers[i].name == name) return i;
    known += (i ? ", " : "") + optimizers[i].name;
  }
  throw std::invalid_argument("no optimizer named '" + std::string(name) +
                              "'; the run's optimizers: " + known);
}

void Trainer::Impl::backward(const at::Tensor& loss, std::size_t i) {
  // While a CUDA graph captures the step, nothing may wait for the GPU: cuda_graph checks the
  // loss of each replay itself.
  if (opt.nan_policy != NanPolicy::ignore && !cuda::capturing(device) && !loss_is_finite(loss)) {
    if (opt.nan_policy == NanPolicy::error)
      throw std::runtime_error(
          "non-finite loss (" + std::to_string(loss.item<double>()) + ")" +
          (optimizers.size() > 1 ? " for optimizer '" + optimizers[i].name + "'" : "") +
          " at epoch " + std::to_string(state.epoch) + ", batch " +
          std::to_string(state.batch_idx) + ", optimizer step " +
          std::to_string(state.optimizer_step) +
          "; set trainer.nan_policy = \"skip\" to skip such steps");
    skip_batch = true;
    return;
  }
  current_opt = i;
  backward_loss = loss;
  {
    PhaseTimer t(step_profiler(), Profiler::backward);
    dispatch.run_stage(Stage::backward);
  }
  {
    PhaseTimer t(step_profiler(), Profiler::hooks);
    dispatch.emit(Point::after_backward);
  }
  current_opt = 0;
}

bool Trainer::Impl::step_optimizer(std::size_t i) {
  PhaseTimer t(step_profiler(), Profiler::optimizer);
  current_opt = i;
  const bool stepped = !skip_batch && dispatch.run_stage(Stage::optimizer_step);
  dispatch.run_stage(Stage::zero_grad);
  current_opt = 0;
  return stepped;
}

void Trainer::Impl::zero_grad_optimizer(std::size_t i) {
  PhaseTimer t(step_profiler(), Profiler::optimizer);
  current_opt = i;
  dispatch.run_stage(Stage::zero_grad);
  current_opt = 0;
}

// The forward stage (the task's forward, wrapped by handlers), after_pred, the task's loss,
// after_loss: what training and validation steps share.
void Trainer::Impl::forward_and_loss() {
  Profiler* prof = step_profiler();  // training steps only
  output = Output{};
  // The first training step's matrix products and convolutions (forward and loss; the
  // backward is counted as twice the forward, as is usual).
  const bool count = in_step && opt.flops && flops_per_step < 0 && !manual;
  double counted = 0;
  auto take_counts = [&](const FlopCounter& c) {
    counted += c.flops();
    step_matmuls.insert(step_matmuls.end(), c.matmuls().begin(), c.matmuls().end());
    if (c.conv_dtype() >= 0) step_conv_dtype = c.conv_dtype();
  };
  {
    PhaseTimer t(prof, Profiler::forward);
    std::optional<FlopCounter> c;
    if (count) c.emplace();
    dispatch.run_stage(Stage::forward);
    if (c) take_counts(*c);
  }
  if (!output.pred.defined())
    throw std::runtime_error("the task's forward() returned no prediction");
  {
    PhaseTimer t(prof, Profiler::hooks);
    dispatch.emit(Point::after_pred);
  }
  {
    PhaseTimer t(prof, Profiler::loss);
    std::optional<FlopCounter> c;
    if (count) c.emplace();
    dispatch.set_where("the task's loss()");
    at::Tensor pred = output.pred;
    Output o = task->loss(ctx, pred, batch);
    output.loss = std::move(o.loss);
    output.metrics = std::move(o.metrics);
    if (c) take_counts(*c);
  }
  if (count) set_step_flops(3 * counted, /*with_backward=*/true);
  if (!output.loss.defined()) throw std::runtime_error("the task's loss() returned no loss");
  PhaseTimer t(prof, Profiler::hooks);
  dispatch.emit(Point::after_loss);
}

// A second pass for an optimizer_step handler (SAM): the step's output is put back after it.
at::Tensor Trainer::Impl::recompute_loss() {
  struct Restore {
    Impl& I;
    Output first;
    ~Restore() {
      I.output = std::move(first);
      I.recomputing = false;
    }
  } restore{*this, std::move(output)};
  recomputing = true;
  forward_and_loss();
  at::Tensor loss = output.loss;
  {
    PhaseTimer t(step_profiler(), Profiler::backward);
    dispatch.set_where("the backward pass of Context::recompute_loss()");
    loss.backward();
  }
  return loss.detach();
}

void Trainer::Impl::train_step(BatchLoader& loader) {
  Profiler* prof = dispatch.profiler();
  const auto t_step = prof ? Profiler::Clock::now() : Profiler::Clock::time_point{};
  state.batch_size = loader.size_of(state.batch_idx);
  state.stepped = false;
  in_step = true;
  if (first_step_s < 0) first_step_s = process_age_seconds();
  {
    PhaseTimer t(prof, Profiler::hooks);
    dispatch.emit(Point::before_step);
  }
  {
    // The batch is drawn after before_step: a checkpoint taken there holds nothing of it.
    PhaseTimer t(prof, Profiler::data);
    dispatch.set_where("the training data's get()");
    Loaded got = loader.take(state.batch_idx);
    if (got.state) data_state = std::move(got.state);
    batch = to_device(std::move(got.batch));
  }
  skip_batch = false;
  if (manual) {
    // The task runs backward and steps itself, through the Context (same stage chains).
    // Profiled, its time less its backward and steps (phases of their own) counts as forward.
    {
      PhaseTimer t(prof, Profiler::forward);
      dispatch.set_where("the task's train_step()");
      // Under manual optimization the first step's ops are counted as the task runs them,
      // its backward included.
      std::optional<FlopCounter> c;
      if (opt.flops && flops_per_step < 0) c.emplace();
      output = task->train_step(ctx, batch);
      if (c) {
        const double counted = c->flops();
        step_matmuls = c->matmuls();
        step_conv_dtype = c->conv_dtype();
        c.reset();
        set_step_flops(counted, /*with_backward=*/false);
      }
    }
    PhaseTimer t(prof, Profiler::hooks);
    dispatch.emit(Point::after_pred);
    dispatch.emit(Point::after_loss);
  } else {
    dispatch.run_stage(Stage::gradients);
    // One backward, then each optimizer's step (several: one per module) through its chain.
    for (std::size_t i = 0; i < optimizers.size(); ++i)
      if (step_optimizer(i)) state.stepped = true;
  }
  if (state.stepped) ++state.optimizer_step;
  if (skip_batch) {
    ++state.skipped_steps;
  } else {
    if (output.loss.defined()) epoch.losses.push_back(output.loss.detach());
    for (const auto& [k, v] : output.metrics) epoch.add_metric(k, v);
  }
  ++state.micro_step;
  state.samples_seen += state.batch_size * state.num_processes;
  samples_this_run += state.batch_size * state.num_processes;
  // The step's record is written before after_step, so that a hook there (a checkpoint) sees
  // the step complete, its record included.
  {
    PhaseTimer t(prof, Profiler::records);
    log_step_if_due();
  }
  in_step = false;
  pos = {state.epoch, state.batch_idx + 1};
  {
    PhaseTimer t(prof, Profiler::hooks);
    dispatch.emit(Point::after_step);
  }
  if (prof) prof->add_step(Profiler::since(t_step));
}

std::vector<std::pair<std::string, double>> Trainer::Impl::train_means(bool whole_epoch) {
  // [sum, count] per value: the loss, then each training metric; one all-reduce for all.
  std::vector<at::Tensor> parts;
  auto add = [&](const std::vector<at::Tensor>& v, std::size_t from) {
    if (from >= v.size()) {
      parts.push_back(torch::zeros({2}, torch::kDouble));
      return;
    }
    auto s = torch::stack(at::TensorList(v).slice(from)).to(torch::kDouble).sum().cpu();
    parts.push_back(torch::stack(
        {s, torch::scalar_tensor(static_cast<double>(v.size() - from), torch::kDouble)}));
  };
  add(epoch.losses, whole_epoch ? 0 : epoch.logged_loss);
  for (std::size_t k = 0; k < epoch.names.size(); ++k)
    add(epoch.metrics[k], whole_epoch ? 0 : epoch.logged_metric[k]);
  auto packed = torch::cat(parts);
  if (distributed()) collectives->all_reduce_sum(packed);
  auto a = packed.accessor<double, 1>();
  std::vector<std::pair<std::string, double>> out;
  if (a[1] > 0) out.emplace_back("train/loss", a[0] / a[1]);
  for (std::size_t k = 0; k < epoch.names.size(); ++k) {
    const auto i = static_cast<std::int64_t>(2 * (k + 1));
    if (a[i + 1] > 0) out.emplace_back("train/" + epoch.names[k], a[i] / a[i + 1]);
  }
  return out;
}

void Trainer::Impl::log_step_if_due() {
  if (opt.log_every <= 0 || state.micro_step % opt.log_every != 0 ||
      epoch.losses.size() <= epoch.logged_loss)
    return;
  Record r;
  r.kind = Record::Kind::step;
  r.values = train_means(/*whole_epoch=*/false);
  add_lrs(r);
  add_flops(r, state.micro_step - window_micro0, seconds_since(window_t0));
  window_t0 = Clock::now();
  window_micro0 = state.micro_step;
  epoch.logged_loss = epoch.losses.size();
  for (std::size_t k = 0; k < epoch.names.size(); ++k)
    epoch.logged_metric[k] = epoch.metrics[k].size();
  r.epoch = state.epoch;
  r.step = state.optimizer_step;
  r.samples_seen = state.samples_seen;
  r.time_s = seconds_since(fit_start);
  records.write(std::move(r));
}

void Trainer::Impl::set_step_flops(double counted, bool with_backward) {
  flops_per_step = counted;
  // The peak is probed after this step ends (probe_peak), outside every timer of the step.
  probe_due = peak_flops <= 0 && counted > 0;
  probe_with_backward = with_backward;
  if (probe_due) return;
  step_matmuls.clear();
  // The first rate starts with the next step: this one counted (more work than the others).
  window_t0 = Clock::now();
  window_micro0 = state.micro_step + 1;
}

void Trainer::Impl::probe_peak() {
  probe_due = false;
  // The peak is what this machine reaches on the step's own matrix products (in their dtype,
  // bf16 under autocast) when they are most of its work; else on square products in the
  // convolutions' dtype. Probed long enough for a steady clock; its time is no step's.
  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  double products = 0;
  for (const auto& m : step_matmuls) products += m.flops() * (probe_with_backward ? 3 : 1);
  peak_flops =
      1e9 * (products >= 0.5 * flops_per_step
                 ? probe_peak_gflops(step_matmuls, probe_with_backward, kPeakProbeSeconds)
                 : measure_peak_gflops(kPeakProbeSeconds,
                                       step_conv_dtype == static_cast<int>(at::kBFloat16)));
  probe_seconds += seconds_since(t0);
  probe_cpu_seconds += process_cpu_seconds() - c0;
  step_matmuls.clear();
  // The first rate starts with the next step: the counted one did more work than the others.
  window_t0 = Clock::now();
  window_micro0 = state.micro_step;
}

void Trainer::Impl::add_flops(Record& r, std::int64_t steps, double seconds) const {
  if (flops_per_step <= 0 || steps <= 0 || seconds <= 0) return;
  const double mine = flops_per_step * static_cast<double>(steps) / seconds;
  r.values.emplace_back("train/flops_per_s", mine * static_cast<double>(state.num_processes));
  if (peak_flops > 0) r.values.emplace_back("train/flops_utilization", mine / peak_flops);
}

// A CancelStep or CancelEpoch was caught: count it and tell the after_cancel hooks.
void Trainer::Impl::cancelled(CancelScope scope) {
  const bool step = scope == CancelScope::step;
  ++(step ? cancelled_steps : cancelled_epochs);
  CancelInfo info{scope, step ? CancelReason::cancel_step : CancelReason::cancel_epoch,
                  dispatch.blame(step ? "CancelStep" : "CancelEpoch")};
  in_step = false;
  cancel = &info;
  dispatch.emit(Point::after_cancel);
  cancel = nullptr;
}

void Trainer::Impl::train_epoch(std::int64_t first_batch) {
  model->train();
  state.phase = Phase::train;
  if (first_batch == 0) epoch_start = {};  // a resume's new dealing lasts for its epoch
  const std::int64_t nb = train_batches();
  state.batches_in_epoch = nb;
  state.batch_idx = first_batch;
  // Resumed mid-epoch: the epoch's earlier values (restored) count in its records as they
  // would have.
  if (!(first_batch > 0 && resumed_mid_epoch)) epoch.clear();
  resumed_mid_epoch = false;
  epoch.losses.reserve(static_cast<std::size_t>(nb));
  pos = {state.epoch, first_batch};

  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  const double probe0 = probe_seconds, probe_cpu0 = probe_cpu_seconds;
  window_t0 = t0;
  window_micro0 = epoch_micro0 = state.micro_step;
  // The state the data starts the epoch with (restored, or as the task made it), before any
  // loader thread moves it on.
  if (train_ds->has_state() && !data_state) {
    data_state = std::make_shared<StateDict>();
    train_ds->save_state(*data_state);
  }
  try {
    dispatch.emit(Point::before_epoch);  // a CancelEpoch here skips this epoch's training
    // Started after before_epoch (hooks there may change the data's state); its threads are
    // joined on every way out of this block.
    BatchLoader loader(train_plan(first_batch), opt.num_workers);
    for (std::int64_t b = first_batch; b < nb; ++b) {
      if (interrupt_requested()) throw Interrupted{};
      state.batch_idx = b;
      try {
        train_step(loader);
        if (probe_due) probe_peak();
      } catch (const CancelStep&) {
        cancelled(CancelScope::step);
        pos = {state.epoch, b + 1};
      }
      // max_steps is reached at the same step on every rank; other stop requests may come
      // from one rank alone, so data-parallel runs agree on them first.
      const bool max_reached = opt.max_steps > 0 && state.optimizer_step >= opt.max_steps;
      if (max_reached && !stop) {
        stop = true;
        stop_reason = "max_steps (" + std::to_string(opt.max_steps) + ") reached";
      }
      if (max_reached || agreed_stop(false)) break;
    }
  } catch (const CancelEpoch&) {
    cancelled(CancelScope::epoch);
  }
  epoch_train_s = seconds_since(t0) - (probe_seconds - probe0);
  train_seconds += epoch_train_s;
  train_cpu_seconds += process_cpu_seconds() - c0 - (probe_cpu_seconds - probe_cpu0);
}

LoadPlan Trainer::Impl::eval_plan(Dataset& ds, const at::Tensor& order, const char* what) {
  const std::int64_t local = order.size(0), bs = run.valid_batch_size;
  LoadPlan plan;
  plan.ds = &ds;
  plan.phase = Phase::valid;
  plan.seed = opt.seed;
  plan.epoch = state.epoch;
  plan.end = (local + bs - 1) / bs;
  plan.what = what;
  plan.pin = device.is_cuda();
  plan.indices = [order, local, bs](std::int64_t b) {
    return order.slice(0, b * bs, std::min(local, (b + 1) * bs));
  };
  return plan;
}

ValidResult Trainer::Impl::validation(Dataset* ds, const std::string& prefix) {
  ValidResult res;
  if (!ds) return res;
  torch::NoGradGuard no_grad;
  model->eval();
  state.phase = Phase::valid;
  const std::int64_t saved_batch = state.batch_idx, saved_nb = state.batches_in_epoch;
  const bool valid = ds == valid_ds.get();
  // The dispatcher keeps a view of its place: literals only.
  const char* get_where = valid ? "the validation data's get()" : "the training data's get()";
  LoadPlan plan = eval_plan(*ds, valid_order(ds->size(), sharding()),
                            valid ? "the validation data" : "the training data");
  state.batches_in_epoch = plan.end;
  state.batch_idx = 0;

  at::Tensor loss_sum;
  std::vector<std::string> names;
  std::vector<at::Tensor> sums;
  std::int64_t count = 0;
  for (auto& m : metrics) m.metric->reset();
  // CancelStep skips one validation batch, CancelEpoch the rest of this validation.
  try {
    dispatch.emit(Point::before_valid);
    BatchLoader loader(std::move(plan), opt.num_workers);
    for (std::int64_t b = 0; b < state.batches_in_epoch; ++b) {
      state.batch_idx = b;
      try {
        const std::int64_t m = loader.size_of(b);
        state.batch_size = m;
        dispatch.emit(Point::before_step);
        dispatch.set_where(get_where);
        batch = to_device(loader.take(b).batch);
        forward_and_loss();
        auto l = output.loss.detach().to(torch::kDouble) * static_cast<double>(m);
        loss_sum = loss_sum.defined() ? loss_sum + l : l;
        for (const auto& [k, v] : output.metrics) {
          std::size_t i = 0;
          while (i < names.size() && names[i] != k) ++i;
          auto x = v.detach().to(torch::kDouble) * static_cast<double>(m);
          if (i == names.size()) {
            names.push_back(k);
            sums.push_back(x);
          } else {
            sums[i] = sums[i] + x;
          }
        }
        count += m;
        for (std::size_t i = 0; i < metrics.size(); ++i) {
          dispatch.set_where(metric_places[i].first);
          metrics[i].metric->update(output.pred.detach(), batch.target);
        }
        dispatch.emit(Point::after_step);
      } catch (const CancelStep&) {
        cancelled(CancelScope::step);
      }
    }
  } catch (const CancelEpoch&) {
    cancelled(CancelScope::epoch);
  }
  // One device sync for the whole validation; one all-reduce across ranks when data-parallel.
  std::vector<at::Tensor> parts;
  parts.push_back(loss_sum.defined() ? loss_sum.reshape({1}).cpu()
                                     : torch::zeros({1}, torch::kDouble));
  for (auto& s : sums) parts.push_back(s.reshape({1}).cpu());
  parts.push_back(torch::full({1}, static_cast<double>(count), torch::kDouble));
  auto packed = torch::cat(parts);
  if (distributed()) collectives->all_reduce_sum(packed);
  auto acc = packed.accessor<double, 1>();
  const double total = acc[packed.size(0) - 1];
  res.samples = static_cast<std::int64_t>(total);
  if (total > 0) {
    res.values.emplace_back(prefix + "loss", acc[0] / total);
    for (std::size_t k = 0; k < names.size(); ++k)
      res.values.emplace_back(prefix + names[k], acc[static_cast<std::int64_t>(k) + 1] / total);
    compute_metrics(res, prefix);
  }
  model->train();
  state.phase = Phase::train;
  state.batch_idx = saved_batch;
  state.batches_in_epoch = saved_nb;
  return res;
}

void Trainer::Impl::compute_metrics(ValidResult& res, const std::string& prefix) {
  if (metrics.empty()) return;
  // Every state tensor of every metric, flattened into one float64 vector: one all-reduce.
  // A rank without validation samples has empty states: the size check below then stops every
  // rank alike.
  std::vector<at::Tensor> flat = {at::zeros({0}, at::kDouble)};
  for (auto& e : metrics)
    for (const auto& t : e.metric->state())
      flat.push_back(t.detach().to(at::kCPU, at::kDouble).reshape({-1}));
  // Row tensors (Metric::rows, SDK 2.2) are joined over the ranks, not summed.
  std::vector<at::Tensor*> rows;
  for (auto& e : metrics)
    if (e.api_minor >= 2)
      if (auto* r = e.metric->rows())
        for (auto& t : *r) rows.push_back(&t);
  if (distributed()) {
    auto packed = at::cat(flat);
    // Ranks whose states differ in shape cannot be summed: say so, not garble the sum. The
    // sizes agree when the sum of their squares is world * size²; every rank sees the same
    // sums, so all of them decide alike (none is left waiting in the next all-reduce).
    const double n = static_cast<double>(packed.numel()), r = static_cast<double>(rows.size());
    auto sizes = at::tensor({n, n * n, r, r * r}, at::kDouble);
    collectives->all_reduce_sum(sizes);
    const double w = static_cast<double>(state.num_processes);
    if (sizes[1].item<double>() * w != sizes[0].item<double>() * sizes[0].item<double>() ||
        sizes[3].item<double>() * w != sizes[2].item<double>() * sizes[2].item<double>())
      throw std::runtime_error(
          "the ranks' metric states differ in size (a rank saw other prediction shapes, or no "
          "validation sample), so they cannot be summed; every rank must see the same "
          "prediction shapes, and at least one validation sample");
    collectives->all_reduce_sum(packed);
    std::int64_t off = 0;
    for (auto& e : metrics)
      for (auto& t : e.metric->state()) {
        const std::int64_t len = t.numel();
        t.copy_(packed.slice(0, off, off + len).reshape(t.sizes()).to(t.options()));
        off += len;
      }
    for (auto* t : rows) *t = join_rows(*t).to(t->device());
  }
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    auto& e = metrics[i];
    dispatch.set_where(metric_places[i].second);
    if (e.metric->state().empty())
      throw std::runtime_error(
          "it has no state after the validation's updates (a bug in the "
          "plugin: update() must size its state)");
    // The whole-set value replaces a task's per-batch mean of the same name.
    for (const auto& [k, v] : e.metric->compute())
      set_value(res.values, prefix + e.instance + (k.empty() ? "" : "/" + k), v);
    // Files only from a fit that holds the run folder (not Trainer::validate from outside).
    if (in_fit && writes_outputs() && lock.held())
      e.metric->write_files(run.output_dir, e.instance);
  }
}

at::Tensor Trainer::Impl::join_rows(const at::Tensor& mine) {
  const std::int64_t world = state.num_processes, rank = state.rank;
  // Row counts by rank, then the shape of a row (rank, 8 sizes) and its squares: the ranks
  // agree on it when sum² = world * squares, and all of them see the same sums.
  constexpr std::int64_t kDims = 9;
  auto head = at::zeros({world + 2 * kDims}, at::kDouble);
  auto h = head.accessor<double, 1>();
  h[rank] = static_cast<double>(mine.dim() > 0 ? mine.size(0) : 0);
  for (std::int64_t i = 0; i < kDims; ++i) {
    const double d = i == 0 ? mine.dim() : (i < mine.dim() ? mine.size(i) : 0);
    h[world + i] = d;
    h[world + kDims + i] = d * d;
  }
  collectives->all_reduce_sum(head);
  const auto sum = head.slice(0, world, world + kDims);
  const auto squares = head.slice(0, world + kDims);
  if (mine.dim() == 0 || mine.dim() > kDims ||
      !at::equal(sum * sum, squares * static_cast<double>(world)))
    throw std::runtime_error(
        "the ranks' rows differ in shape (" + std::to_string(mine.dim()) +
        "-d here), so they cannot be joined; every rank must give rows of one shape, and have "
        "at least one sample (use fewer ranks than samples)");
  std::int64_t total = 0, offset = 0;
  for (std::int64_t r = 0; r < world; ++r) {
    const auto n = static_cast<std::int64_t>(h[r]);
    if (r < rank) offset += n;
    total += n;
  }
  std::vector<std::int64_t> shape(mine.sizes().begin(), mine.sizes().end());
  shape[0] = total;
  auto all = at::zeros(shape, at::kDouble);
  all.slice(0, offset, offset + mine.size(0)).copy_(mine.to(at::kCPU, at::kDouble));
  collectives->all_reduce_sum(all);
  return all.to(mine.scalar_type());
}

void Trainer::Impl::write_epoch_record(Clock::time_point t_epoch, std::int64_t samples_before) {
  Record r;
  r.kind = Record::Kind::epoch;
  r.values = train_means(/*whole_epoch=*/true);
  for (const auto& kv : last_valid.values) r.values.push_back(kv);
  add_lrs(r);
  const double dt = seconds_since(t_epoch);
  r.values.emplace_back("epoch_time_s", dt);
  r.values.emplace_back("samples_per_s",
                        dt > 0 ? static_cast<double>(samples_this_run - samples_before) / dt : 0.0);
  add_flops(r, state.micro_step - epoch_micro0, epoch_train_s);
  r.values.emplace_back("peak_rss_mb", peak_rss_mb());
  r.epoch = state.epoch;
  r.step = state.optimizer_step;
  r.samples_seen = state.samples_seen;
  r.time_s = seconds_since(fit_start);
  records.write(std::move(r));
}

bool Trainer::Impl::writes_outputs() const {
  // Data-parallel ranks share the run directory; rank 0 writes it (the metrics are reduced).
  return opt.write_outputs && !run.output_dir.empty() && state.rank == 0;
}

void Trainer::Impl::lock_outputs() {
  if (!writes_outputs()) return;
  const fs::path dir(run.output_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("cannot create output_dir '" + dir.string() + "': " + ec.message() +
                             "; set trainer.output_dir to a writable folder");
  lock.acquire(dir);
}

void Trainer::Impl::open_outputs() {
  if (!writes_outputs()) return;
  const fs::path dir(run.output_dir);
  // A resumed run appends to the history it continues (cut back to its checkpoint when the
  // checkpoint is restored); a new run starts it afresh.
  records.open(dir / "metrics.jsonl", /*append=*/!run.resume.empty());
}

// summary.json says "running" from the start of a fit, so that a run that dies (a crash, a
// kill) never leaves an earlier run's "completed" behind; the end writes the truth.
void Trainer::Impl::write_summary_file(const FitResult* res) {
  // Not into a folder another fit holds.
  if (!writes_outputs() || !lock.held()) return;
  Summary s;
  s.status = res ? to_string(res->status) : "running";
  if (res) {
    s.error = res->error;
    s.stop_reason = res->stop_reason;
  }
  s.epochs = state.epoch + (res && res->status == FitResult::Status::completed ? 1 : 0);
  if (start.epoch >= opt.epochs) s.epochs = opt.epochs;
  s.optimizer_steps = state.optimizer_step;
  s.micro_steps = state.micro_step;
  s.samples_seen = state.samples_seen;
  s.skipped_steps = state.skipped_steps;
  s.cancelled_steps = cancelled_steps;
  s.cancelled_epochs = cancelled_epochs;
  s.num_processes = state.num_processes;
  s.wall_s = seconds_since(fit_start);
  s.train_samples_per_s =
      train_seconds > 0 ? static_cast<double>(samples_this_run) / train_seconds : 0.0;
  s.valid = last_valid.values;
  s.train_cpu_s = train_cpu_seconds;
  if (res) {
    s.model_fingerprint = self->model_fingerprint();
    if (!res->model_file.empty()) s.model_file = fs::path(res->model_file).filename().string();
    s.model_weights = res->model_weights;
  }
  s.config = run.config_path;
  s.overrides = opt.overrides;
  s.flops_per_step = std::max(flops_per_step, 0.0);
  s.peak_gflops = peak_flops / 1e9;
  s.batch_size = opt.batch_size;
  s.batch_size_search = opt.batch_size_search;
  s.start_to_first_step_s = first_step_s;
  if (const Profiler* p = dispatch.profiler()) {
    s.profile_json = profile_json(p->snapshot(s.wall_s));
    s.memory_json = memory_json(p->memory.snapshot());
  }
  write_summary(fs::path(run.output_dir) / "summary.json", s);
}

FitResult Trainer::fit() {
  auto& I = *impl_;
  FitResult res;
  I.fit_start = Clock::now();
  I.stop = false;
  I.in_fit = true;
  clear_interrupt();
  StopSignalScope stop_signals;
  I.dispatch.set_where("start");
  // What ends the fit other than completion, and how after_cancel hears of it.
  CancelInfo ending;
  auto end_with = [&](FitResult::Status st, CancelReason why, std::string msg) {
    res.status = st;
    (st == FitResult::Status::failed ? res.error : res.stop_reason) = msg;
    ending = {CancelScope::fit, why, std::move(msg)};
  };
  std::shared_ptr<void> memory_counting;  // a profiled fit's peak memory per phase
  try {
    I.lock_outputs();  // before anything in the output folder is written
    connect();
    if (auto* p = I.dispatch.profiler())
      memory_counting = p->memory.start(cpu_tensor_bytes(*I.model));
    warn_if_reference_blas();
    I.open_outputs();
    I.write_summary_file(nullptr);
    I.dispatch.set_where("before_fit");
    I.rewind_records = -1;
    I.dispatch.emit(Point::before_fit);
    // "--resume auto" with nothing to resume from (a restart before the first checkpoint):
    // a fresh start, so what the failed attempt logged is dropped.
    const bool fresh_auto = I.run.resume == "auto" && !I.resumed;
    if (fresh_auto) {
      I.rewind_records = 0;
      if (I.state.is_main_process())
        std::fprintf(stderr,
                     "wick: --resume auto: no checkpoint was restored (none yet, or no "
                     "checkpoint hook); training from the start\n");
    }
    if (I.rewind_records >= 0 && !I.opt.write_outputs) I.records.set_count(I.rewind_records);
    if (I.rewind_records >= 0 && I.opt.write_outputs) {
      I.dispatch.set_where("rewinding the metrics records to the checkpoint");
      I.records.rewind(fs::path(I.run.output_dir) / "metrics.jsonl", I.rewind_records,
                       /*truncate=*/I.state.is_main_process());
    }
    if (I.state.num_processes > 1 && !I.collectives)
      throw ConfigError("WORLD_SIZE is " + std::to_string(I.state.num_processes) +
                        " but no hook set up data-parallel training, so the ranks would train "
                        "apart; add [[hooks]] plugin = \"ddp\" to the config");
    if (!I.run.resume.empty() && !I.resumed && !fresh_auto)
      throw std::runtime_error("--resume " + I.run.resume +
                               " was given but no hook restored a checkpoint; enable one with "
                               "[[hooks]] plugin = \"checkpoint\"");
    // The peak utilisation is measured against, when given; else probed at the first step.
    if (I.opt.flops && I.opt.peak_gflops > 0) I.peak_flops = I.opt.peak_gflops * 1e9;
    for (std::int64_t e = I.start.epoch; e < I.opt.epochs; ++e) {
      I.state.epoch = e;
      const auto t_epoch = Clock::now();
      const auto samples_before = I.samples_this_run;
      I.train_epoch(e == I.start.epoch ? I.start.batch : 0);
      if (interrupt_requested()) throw Interrupted{};
      {
        PhaseTimer t(I.dispatch.profiler(), Profiler::validation);
        I.last_valid = I.validation(I.valid_ds.get());
      }
      I.write_epoch_record(t_epoch, samples_before);
      I.pos = {e + 1, 0};
      I.dispatch.emit(Point::after_epoch);
      I.state.batch_idx = 0;
      // A Ctrl-C during validation or after_epoch (the last epoch's included) still counts.
      if (interrupt_requested()) throw Interrupted{};
      if (I.agreed_stop(true)) break;
    }
    I.dispatch.emit(Point::after_fit);
    res.stop_reason = I.stop_reason;
  } catch (const CancelFit&) {
    end_with(FitResult::Status::cancelled, CancelReason::cancel_fit, I.dispatch.blame("CancelFit"));
  } catch (const Interrupted&) {
    res.signal = interrupt_signal();
    end_with(FitResult::Status::cancelled, CancelReason::interrupt, stop_signal_reason(res.signal));
  } catch (const Cancel& c) {
    // A CancelStep or CancelEpoch thrown outside its scope (e.g. in before_fit) ends the fit.
    end_with(FitResult::Status::cancelled, CancelReason::cancel_fit, I.dispatch.blame(c.what()));
  } catch (const ConfigError& e) {
    // Every configuration error exits 2, whichever layer finds it.
    end_with(FitResult::Status::failed, CancelReason::failure, I.dispatch.blame(e.what()));
    res.config_error = true;
  } catch (const std::exception& e) {
    end_with(FitResult::Status::failed, CancelReason::failure, I.dispatch.blame(e.what()));
  } catch (...) {
    end_with(FitResult::Status::failed, CancelReason::failure,
             I.dispatch.blame("an exception that is not a std::exception (a plugin threw a "
                              "non-standard type)"));
  }
  if (res.status != FitResult::Status::completed) {
    // after_cancel runs once on the way out; an error inside it is reported, not rethrown.
    auto report = [&](const std::string& msg) {
      res.error = res.error.empty() ? msg : res.error + "; then " + msg;
      res.status = FitResult::Status::failed;
    };
    I.cancel = &ending;
    try {
      I.dispatch.emit(Point::after_cancel);
    } catch (const std::exception& e) {
      report(I.dispatch.blame(e.what()));
    } catch (...) {
      report(I.dispatch.blame("an exception that is not a std::exception"));
    }
    I.cancel = nullptr;
  }
  I.dispatch.set_where("end");
  I.in_fit = false;
  try {
    I.save_final_weights(res);
  } catch (const std::exception& e) {
    // The trained weights could not be kept: the run must not look like a success.
    res.status = FitResult::Status::failed;
    res.error = (res.error.empty() ? "" : res.error + "; then ") + e.what();
  }
  try {
    I.write_summary_file(&res);
  } catch (const std::exception& e) {
    // The run's record of itself could not be written: it must not look like a success.
    res.status = FitResult::Status::failed;
    res.error = (res.error.empty() ? "" : res.error + "; then ") + e.what();
    std::fprintf(stderr, "wick: %s\n", e.what());
  }
  I.lock.release();
  return res;
}

ValidResult Trainer::validate() {
  connect();
  return impl_->validation(impl_->valid_ds.get());
}

}  // namespace wick
