// The Trainer: its construction (the run's facts, model, data and optimizers, checked), its
// accessors, and fit(): the orchestration of epochs, validation, records and the ways a fit
// ends. The phases themselves live with their components (trainer_impl.hpp lists them).
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "config/trainer_options.hpp"
#include "data/device_data.hpp"
#include "loop/crash_report.hpp"
#include "loop/model_parts.hpp"
#include "loop/trainer_impl.hpp"
#include "wick/config.hpp"
#include "wick/params.hpp"
#include "wick/sha256.hpp"
#include "wick/system.hpp"

namespace wick {

namespace fs = std::filesystem;

namespace {

// Fits of one process run on one thread at a time (nested on it, as a sweep's, is fine):
// what a fit installs for its duration is the process's, not the fit's: the stop signals'
// handlers and flag, the fatal-signal report, LibTorch's thread count.
class OneFittingThread {
 public:
  OneFittingThread() {
    std::lock_guard<std::mutex> lock(mu());
    auto& [owner, depth] = state();
    if (depth > 0 && owner != std::this_thread::get_id())
      throw std::logic_error(
          "fit() while another thread's fit runs in this process: the stop signals' handlers, "
          "the crash report and LibTorch's thread count are the process's, not a fit's; run "
          "the fits one after another, or each in its own process (wick launch, a subprocess)");
    owner = std::this_thread::get_id();
    ++depth;
  }
  ~OneFittingThread() {
    std::lock_guard<std::mutex> lock(mu());
    --state().second;
  }
  OneFittingThread(const OneFittingThread&) = delete;
  OneFittingThread& operator=(const OneFittingThread&) = delete;

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::pair<std::thread::id, int>& state() {
    static std::pair<std::thread::id, int> s{{}, 0};
    return s;
  }
};
torch::Device to_torch(const Device& d) {
  return d.is_cpu() ? torch::Device(torch::kCPU)
                    : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index));
}

}  // namespace

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
  if (I.opt.auto_threads)
    at::set_num_threads(auto_threads(&I.threads_why));
  else if (I.opt.threads > 0)
    at::set_num_threads(static_cast<int>(I.opt.threads));

  const Device dev = resolve_device(I.opt.device, I.opt.auto_device);
  I.device = to_torch(dev);
  make_current(dev);  // the task's model() may make tensors on "the" GPU (fit does it again)

  // The run's facts, as plugins see them.
  I.run = std::move(run);
  view_options(I.opt, dev, I.run);
  if (I.run.output_dir.empty()) I.run.output_dir = fs::absolute(I.opt.output_dir).string();

  // Data-parallel ranks come from the launcher's torchrun-style variables.
  I.state.num_processes = I.dp.world();
  I.state.rank = I.dp.rank();
  I.run.world_size = I.state.num_processes;
  I.run.rank = I.state.rank;

  seed_generators(static_cast<std::uint64_t>(I.opt.seed), dev.is_cuda());
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
  if (I.valid_ds)
    check_valid_shards(I.valid_ds->size(), I.sharding(), cfg_at + "the task's validation data");
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
  if (I.opt.data_on_device) I.train_on_device = on_device(I.train_ds, I.device, cfg_at);
  I.optimizers = make_optimizers(I.optim_specs, *I.model);
  I.steps.manual = I.task->manual_optimization();
  I.state.epochs = I.opt.epochs;

  I.steps.install_stage_defaults();
  I.flops.configure(I.opt.flops, I.opt.peak_gflops, {I.device.is_cuda(), I.device.index()});
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
  impl_->eval.add_metric(std::move(entry));
}
const std::vector<MetricEntry>& Trainer::metrics() const {
  return impl_->eval.metrics();
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
  if (!I.dispatch.connected()) add_task_hook();
  I.dispatch.connect(I.state.rank);
}
void Trainer::connect_for_evaluation() {
  auto& I = *impl_;
  if (I.dispatch.connected()) return;
  add_task_hook();
  I.dispatch.connect_forward(I.state.rank);
}
void Trainer::add_task_hook() {
  HookEntry e;
  e.hook = std::make_shared<TaskHook>(impl_->task);
  e.plugin = e.instance = "task";
  impl_->dispatch.add_hook(std::move(e));
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

// A fit is three phases (fit_loop.cpp): its start (before_fit, a resume), its epochs and
// after_fit, then its end, which runs however the first two ended.
FitResult Trainer::fit() {
  auto& I = *impl_;
  // Before the run folder is locked: a trainer made to evaluate a run must not mark it failed.
  if (I.dispatch.evaluation_only())
    throw std::logic_error(
        "fit() on a trainer connected for evaluation only (connect_for_evaluation); make "
        "another Trainer to train");
  // Its counters, records and run folder are one fit's: a second would go on from the first's
  // steps under a fresh history.
  if (I.fit_begun)
    throw std::logic_error(
        "fit() called a second time on one Trainer; a Trainer runs one fit: make another to "
        "train again");
  OneFittingThread one_at_a_time;
  I.fit_begun = true;
  FitResult res;
  CancelInfo ending;  // what ended the fit other than completion, for after_cancel
  clear_interrupt();
  CrashReportScope crash_report(I.dispatch);  // first: a stop signal's handler reports there
  StopSignalScope stop_signals;
  std::shared_ptr<void> memory_counting;  // a profiled fit's peak memory per phase
  // A fit that ran its course ends with the model whole on every rank: after_fit, the final
  // weights and the fingerprint see it as one process would (gathering is collective: not
  // after a failure, when a rank may be gone).
  std::optional<DataParallel::WholeState> whole;
  try {
    memory_counting = I.start_fit();
    I.run_epochs();
    whole.emplace(I.dp, DataParallel::Whole::weights);
    I.dispatch.emit(Point::after_fit);
    res.stop_reason = I.stops.reason;
  } catch (...) {
    I.fit_ended_by(std::current_exception(), res, ending);
  }
  I.end_fit(res, ending);
  return res;
}

ValidResult Trainer::validate() {
  connect();
  return impl_->eval.validation(impl_->valid_ds.get());
}

}  // namespace wick
