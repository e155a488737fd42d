#include "wick/trainer.hpp"

#include <torch/torch.h>

#include <unistd.h>
#include <array>
#include <atomic>
#include <boost/signals2.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <variant>

#include "wick/config.hpp"
#include "wick/outputs.hpp"
#include "wick/params.hpp"
#include "wick/sha256.hpp"
#include "wick/state_dict.hpp"
#include "wick/system.hpp"
#include "wick/task.hpp"

namespace wick {

namespace fs = std::filesystem;

namespace sig2 = boost::signals2;

// Calls the slots in order and, before each, notes whose hook it is (for error messages).
struct BlameCombiner {
  using result_type = void;
  const HookEntry** current = nullptr;
  const HookEntry* const* hooks = nullptr;  // the hook of each slot, in call order
  template <class It>
  void operator()(It first, It last) const {
    for (std::size_t k = 0; first != last; ++first, ++k) {
      *current = hooks[k];
      *first;
    }
  }
};

// The loop is single-threaded per process, so the signals need no mutex (measured faster).
using PointSignal = sig2::signal_type<void(Context&), sig2::keywords::mutex_type<sig2::dummy_mutex>,
                                      sig2::keywords::group_type<int>,
                                      sig2::keywords::combiner_type<BlameCombiner>>::type;

struct Next::Chain {
  std::vector<StageFn> handlers;
  std::function<bool(Context&)> terminal;
};

bool Next::operator()() const {
  if (index_ < chain_->handlers.size())
    return chain_->handlers[index_](*ctx_, Next(chain_, index_ + 1, ctx_));
  return chain_->terminal(*ctx_);
}

namespace {

std::atomic<int> g_interrupts{0};

void on_sigint(int) {
  // Second Ctrl-C: the user wants out now.
  if (g_interrupts.fetch_add(1) >= 1) _exit(130);
}

// Installs the SIGINT handler for the duration of a fit and restores the previous one.
class SigintScope {
 public:
  SigintScope() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintScope() { sigaction(SIGINT, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

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

using Clock = std::chrono::steady_clock;
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

}  // namespace

bool interrupt_requested() {
  return g_interrupts.load(std::memory_order_relaxed) > 0;
}
void request_interrupt() {
  g_interrupts.store(1);
}
void clear_interrupt() {
  g_interrupts.store(0);
}

int FitResult::exit_code() const {
  if (interrupted) return 130;
  return status == Status::failed ? 1 : 0;
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

struct Trainer::Impl {
  Trainer* self = nullptr;
  TrainerOptions opt;
  OptimizerOptions optim_opt;
  RunInfo run;
  std::shared_ptr<Task> task;
  std::shared_ptr<torch::nn::Module> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<Dataset> train_ds, valid_ds;
  torch::Device device{torch::kCPU};

  StepState state;
  Context ctx;
  Batch batch;
  Output output;
  at::Tensor backward_loss;

  std::vector<HookEntry> hooks;
  bool connected = false;
  // One Boost.Signals2 signal per point, slots grouped by order (connect_hooks connects them
  // sorted, once). The combiner records whose slot runs, so an error names its hook without
  // wrapping every slot; `blame` lists the hook of each slot in call order.
  std::array<PointSignal, kNumPoints> signals;
  std::array<std::vector<const HookEntry*>, kNumPoints> blame_order;
  std::array<Next::Chain, kNumStages> chains;
  ScheduleTable table;
  std::vector<std::function<void(const Record&)>> sinks;

  // Who is running, so that an exception names its plugin and point.
  const HookEntry* current = nullptr;
  std::string_view current_where;  // static strings only: set on every emit, so no copies

  // Metrics.
  std::vector<at::Tensor> epoch_losses;  // detached per-batch losses of the current epoch
  std::size_t logged_upto = 0;           // epoch_losses already folded into a step record
  std::vector<std::pair<std::string, std::variant<double, at::Tensor>>> pending;
  Record last_record;
  std::ofstream metrics_out;
  Clock::time_point fit_start = Clock::now();
  double train_seconds = 0, train_cpu_seconds = 0;
  std::int64_t samples_this_run = 0;
  ValidResult last_valid;

  bool stop = false;
  std::string stop_reason;
  std::int64_t cancelled_steps = 0, cancelled_epochs = 0;
  std::int64_t start_epoch = 0, start_batch = 0;
  bool resumed = false;               // set_start was called (a checkpoint was restored)
  at::Tensor resume_losses;           // losses of the resumed epoch before its start batch
  std::size_t resume_logged = 0;      // how many of them were already in a step record
  const FitResult* ending = nullptr;  // set during the final after_cancel
  std::function<void(at::Tensor&)> all_reduce;
  std::function<bool(bool, bool)> stop_agreement;
  std::function<void()> barrier;

  bool agreed_stop(bool epoch_end) {
    return stop_agreement ? stop_agreement(stop, epoch_end) : stop;
  }

  void emit(Point p) {
    const auto i = static_cast<std::size_t>(p);
    // A point nobody subscribed to costs one test (Signals2's empty emit is not free).
    if (blame_order[i].empty()) return;
    current_where = to_string(p);
    signals[i](ctx);
    current = nullptr;
  }

  bool run_stage(Stage s) {
    const auto& chain = chains[static_cast<std::size_t>(s)];
    current_where = to_string(s);
    bool r = Next(&chain, 0, &ctx)();
    current = nullptr;
    return r;
  }

  std::string blame(const std::string& what) const {
    if (current)
      return "plugin '" + current->plugin + "' (instance '" + current->instance + "') at " +
             std::string(current_where) + ": " + what;
    return std::string(current_where) + ": " + what;
  }

  void build_optimizer();
  void open_outputs();
  at::Tensor epoch_order(std::int64_t epoch, std::int64_t n, bool shuffle, bool pad);
  Batch to_device(Batch b) const;
  void train_epoch(std::int64_t first_batch);
  void train_step(const at::Tensor& indices);
  ValidResult validation();
  void write_record(Record r);
  void maybe_log_step();
  double mean_loss(std::size_t from);
  void add_pending(Record& r);
  double current_lr() const;
};

Trainer::Trainer(TrainerOptions options, std::shared_ptr<Task> task, OptimizerOptions optimizer,
                 RunInfo run)
    : impl_(std::make_unique<Impl>()) {
  auto& I = *impl_;
  I.self = this;
  I.opt = std::move(options);
  I.optim_opt = std::move(optimizer);
  I.run = std::move(run);
  I.run.seed = I.opt.seed;
  I.task = std::move(task);
  if (!I.task) throw std::invalid_argument("Trainer: no task");
  if (I.opt.threads > 0) at::set_num_threads(static_cast<int>(I.opt.threads));

  // The config checks this too; a host program building TrainerOptions itself gets it here.
  if (I.opt.nan_policy != "error" && I.opt.nan_policy != "skip" && I.opt.nan_policy != "ignore")
    throw ConfigError("trainer.nan_policy = \"" + I.opt.nan_policy +
                      "\" is not one of \"error\", \"skip\", \"ignore\"");
  std::string dev = I.opt.device;
  if (dev == "auto") dev = torch::cuda::is_available() ? "cuda" : "cpu";
  I.device = torch::Device(dev);
  if (I.device.is_cuda() && !torch::cuda::is_available())
    throw ConfigError("trainer.device = \"" + I.opt.device +
                      "\" but this LibTorch has no CUDA device; use \"cpu\" or \"auto\"");
  I.run.device = I.device.str();
  if (I.run.output_dir.empty()) I.run.output_dir = fs::absolute(I.opt.output_dir).string();

  // Data-parallel ranks come from the launcher's torchrun-style variables.
  if (const char* ws = std::getenv("WORLD_SIZE"))
    I.state.num_processes = std::max(1L, std::atol(ws));
  if (const char* rk = std::getenv("RANK")) I.state.rank = std::atol(rk);

  torch::manual_seed(static_cast<std::uint64_t>(I.opt.seed));
  I.model = I.task->model();
  if (!I.model) throw std::runtime_error("task returned no model");
  I.model->to(I.device);
  I.train_ds = I.task->train_data();
  if (!I.train_ds) throw std::runtime_error("task returned no training data");
  I.valid_ds = I.task->valid_data();
  I.build_optimizer();

  I.state.epochs = I.opt.epochs;
  I.ctx.state_ = &I.state;
  I.ctx.run_ = &I.run;
  I.ctx.trainer_ = this;
  I.ctx.batch_ = &I.batch;
  I.ctx.output_ = &I.output;
  I.ctx.backward_loss_ = &I.backward_loss;
  I.ctx.model_ = I.model.get();
  I.ctx.optimizer_ = I.optimizer.get();

  auto* opt_ptr = I.optimizer.get();
  // The defaults run on no plugin's behalf: an error in them blames no hook.
  Impl* impl = &I;
  I.chains[static_cast<std::size_t>(Stage::backward)].terminal = [impl](Context& c) {
    impl->current = nullptr;
    c.backward_loss().backward();
    return true;
  };
  I.chains[static_cast<std::size_t>(Stage::optimizer_step)].terminal = [impl, opt_ptr](Context&) {
    impl->current = nullptr;
    opt_ptr->step();
    return true;
  };
  // Gradients are set to none rather than zeroed: less memory traffic, same result.
  I.chains[static_cast<std::size_t>(Stage::zero_grad)].terminal = [impl, opt_ptr](Context&) {
    impl->current = nullptr;
    for (auto& group : opt_ptr->param_groups())
      for (auto& p : group.params()) p.mutable_grad() = at::Tensor();
    return true;
  };
}

Trainer::~Trainer() {
  // Disconnect every slot before the hooks (whose code the slots run) go away.
  if (impl_) {
    for (auto& s : impl_->signals) s.disconnect_all_slots();
    for (auto& c : impl_->chains) c.handlers.clear();
    impl_->sinks.clear();
  }
}

void Trainer::Impl::build_optimizer() {
  auto params = model->parameters();
  const auto& o = optim_opt;
  if (o.betas.size() != 2) throw ConfigError("optimizer.betas needs two values");
  auto betas = std::make_tuple(o.betas[0], o.betas[1]);
  if (o.name == "adam") {
    optimizer = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr)
                                                                 .betas(betas)
                                                                 .eps(o.eps)
                                                                 .weight_decay(o.weight_decay)
                                                                 .amsgrad(o.amsgrad));
  } else if (o.name == "adamw") {
    optimizer = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(o.lr)
                    .betas(betas)
                    .eps(o.eps)
                    .weight_decay(o.weight_decay_set ? o.weight_decay : 0.01)
                    .amsgrad(o.amsgrad));
  } else if (o.name == "sgd") {
    optimizer = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                                .momentum(o.momentum)
                                                                .dampening(o.dampening)
                                                                .weight_decay(o.weight_decay)
                                                                .nesterov(o.nesterov));
  } else {
    throw ConfigError("unknown optimizer '" + o.name + "'; use adam, adamw or sgd");
  }
}

void Trainer::add_hook(HookEntry entry) {
  if (impl_->connected) throw std::logic_error("add_hook after connect");
  for (const auto& h : impl_->hooks)
    if (h.instance == entry.instance)
      throw ConfigError("two hooks named '" + entry.instance +
                        "'; give one of them another name with name = \"...\"");
  impl_->hooks.push_back(std::move(entry));
}

const std::vector<HookEntry>& Trainer::hooks() const {
  return impl_->hooks;
}

namespace {

// Connects subscriptions to the trainer's signals and chains, each wrapped so that an
// exception can be blamed on the hook that threw it.
class TrainerSink : public HookSink {
 public:
  explicit TrainerSink(Trainer::Impl& impl) : impl_(impl) {}
  void on(const HookEntry& h, Point p, PointFn fn) override {
    // connect_hooks calls in hook order; within a group Signals2 keeps connection order, so
    // the slots run in the order of blame_order.
    const auto i = static_cast<std::size_t>(p);
    impl_.signals[i].connect(h.order, std::move(fn), boost::signals2::at_back);
    impl_.blame_order[i].push_back(&h);
    impl_.signals[i].set_combiner(BlameCombiner{&impl_.current, impl_.blame_order[i].data()});
  }
  void stage(const HookEntry& h, Stage s, StageFn fn) override {
    Trainer::Impl* impl = &impl_;
    const HookEntry* entry = &h;
    impl_.chains[static_cast<std::size_t>(s)].handlers.push_back(
        [impl, entry, fn = std::move(fn)](Context& c, Next n) {
          // Handlers nest: when this one returns, an error belongs to its caller again.
          const HookEntry* caller = impl->current;
          impl->current = entry;
          bool r = fn(c, n);
          impl->current = caller;
          return r;
        });
  }
  void on_record(const HookEntry&, std::function<void(const Record&)> fn) override {
    impl_.sinks.push_back(std::move(fn));
  }

 private:
  Trainer::Impl& impl_;
};

}  // namespace

void Trainer::connect() {
  auto& I = *impl_;
  if (I.connected) return;
  TrainerSink sink(I);
  connect_hooks(I.hooks, I.state.rank, &sink, I.table);
  I.connected = true;
}

const ScheduleTable& Trainer::schedule() const {
  return impl_->table;
}

void Trainer::emit_for_benchmark(const std::vector<Point>& points, std::int64_t repeats) {
  connect();
  auto& I = *impl_;
  for (std::int64_t r = 0; r < repeats; ++r)
    for (Point p : points) I.emit(p);
}

std::string Trainer::describe() {
  connect();
  return describe_markdown(impl_->table);
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
  return *impl_->optimizer;
}
Context& Trainer::context() {
  return impl_->ctx;
}
void Trainer::set_all_reduce(std::function<void(at::Tensor&)> sum) {
  impl_->all_reduce = std::move(sum);
}
void Trainer::set_stop_agreement(std::function<bool(bool, bool)> agree) {
  impl_->stop_agreement = std::move(agree);
}
void Trainer::set_barrier(std::function<void()> fn) {
  impl_->barrier = std::move(fn);
}
void Trainer::barrier() {
  if (impl_->barrier) impl_->barrier();
}
void Trainer::set_start(std::int64_t epoch, std::int64_t batch) {
  impl_->start_epoch = epoch;
  impl_->start_batch = batch;
  impl_->resumed = true;
}

const FitResult* Trainer::ending() const {
  return impl_->ending;
}

void Trainer::save_loop_state(StateDict& out) const {
  const auto& I = *impl_;
  if (!I.epoch_losses.empty()) out.set_tensor("epoch_losses", torch::stack(I.epoch_losses));
  out.set_int("logged_upto", static_cast<std::int64_t>(I.logged_upto));
  out.set_int("cancelled_steps", I.cancelled_steps);
  out.set_int("cancelled_epochs", I.cancelled_epochs);
  // Values hooks logged for the next record (grad norm, loss scale) that is not written yet.
  out.set_int("pending", static_cast<std::int64_t>(I.pending.size()));
  for (std::size_t i = 0; i < I.pending.size(); ++i) {
    const auto& [k, v] = I.pending[i];
    out.set_string("pending_key." + std::to_string(i), k);
    out.set_float("pending_value." + std::to_string(i),
                  std::holds_alternative<double>(v) ? std::get<double>(v)
                                                    : std::get<at::Tensor>(v).item<double>());
  }
}

void Trainer::load_loop_state(const StateDict& in) {
  auto& I = *impl_;
  I.resume_losses = in.has("epoch_losses") ? in.get_tensor("epoch_losses") : at::Tensor();
  I.resume_logged = static_cast<std::size_t>(in.get_int("logged_upto"));
  I.cancelled_steps = in.get_int("cancelled_steps");
  I.cancelled_epochs = in.get_int("cancelled_epochs");
  I.pending.clear();
  const std::int64_t n = in.has("pending") ? in.get_int("pending") : 0;
  for (std::int64_t i = 0; i < n; ++i)
    I.pending.emplace_back(in.get_string("pending_key." + std::to_string(i)),
                           in.get_float("pending_value." + std::to_string(i)));
}

std::vector<std::pair<std::string, Hook*>> Trainer::stateful_hooks() {
  std::vector<std::pair<std::string, Hook*>> out;
  for (auto& h : impl_->hooks)
    if (h.hook->has_state()) out.emplace_back(h.instance, h.hook.get());
  return out;
}

std::uint64_t Trainer::epoch_seed(std::int64_t epoch) const {
  // splitmix64 of (seed, epoch): distinct, well-mixed seeds per epoch.
  std::uint64_t z = static_cast<std::uint64_t>(impl_->opt.seed) * 0x9E3779B97F4A7C15ull +
                    static_cast<std::uint64_t>(epoch) + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
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

at::Tensor Trainer::Impl::epoch_order(std::int64_t epoch, std::int64_t n, bool shuffle, bool pad) {
  at::Tensor order;
  if (shuffle) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(self->epoch_seed(epoch));
    order = torch::randperm(n, gen, torch::TensorOptions().dtype(torch::kLong));
  } else {
    order = torch::arange(n, torch::kLong);
  }
  const std::int64_t world = state.num_processes, rank = state.rank;
  if (world <= 1) return order;
  if (pad) {
    // DistributedSampler semantics: pad by wrapping to a multiple of the world size, then
    // rank r takes positions r, r+world, ... so every rank runs the same number of batches.
    std::int64_t total = (n + world - 1) / world * world;
    if (total > n) order = torch::cat({order, order.slice(0, 0, total - n)});
    return order.slice(0, rank, total, world).contiguous();
  }
  // Validation: contiguous, unpadded shards, so reduced metrics count each sample once.
  std::int64_t per = (n + world - 1) / world;
  return order.slice(0, std::min(n, rank * per), std::min(n, (rank + 1) * per));
}

Batch Trainer::Impl::to_device(Batch b) const {
  if (device.is_cpu()) return b;
  b.input = b.input.to(device, /*non_blocking=*/true);
  b.target = b.target.to(device, true);
  return b;
}

double Trainer::Impl::current_lr() const {
  const auto& groups = optimizer->param_groups();
  return groups.empty() ? 0.0 : groups[0].options().get_lr();
}

void Trainer::Impl::add_pending(Record& r) {
  for (auto& [k, v] : pending) {
    double x = std::holds_alternative<double>(v) ? std::get<double>(v)
                                                 : std::get<at::Tensor>(v).item<double>();
    // A hook's value replaces the trainer's own of the same key (e.g. lr from a schedule):
    // a record holds each key once.
    auto same = std::find_if(r.values.begin(), r.values.end(),
                             [&](const auto& kv) { return kv.first == k; });
    if (same != r.values.end())
      same->second = x;
    else
      r.values.emplace_back(k, x);
  }
  pending.clear();
}

void Trainer::Impl::write_record(Record r) {
  r.epoch = state.epoch;
  r.step = state.optimizer_step;
  r.samples_seen = state.samples_seen;
  r.time_s = seconds_since(fit_start);
  add_pending(r);
  if (metrics_out.is_open()) {
    metrics_out << record_to_json(r) << '\n';
    metrics_out.flush();
  }
  last_record = std::move(r);
  for (auto& sink : sinks) sink(last_record);
}

void Trainer::Impl::train_step(const at::Tensor& indices) {
  batch = to_device(train_ds->get(indices));
  state.batch_size = indices.size(0);
  state.stepped = false;
  emit(Point::before_step);

  current_where = "task train_step";
  output = task->train_step(batch);
  if (!output.loss.defined()) throw std::runtime_error("train_step returned no loss");
  emit(Point::after_pred);
  emit(Point::after_loss);

  bool finite = true;
  if (opt.nan_policy != "ignore") finite = loss_is_finite(output.loss);
  if (!finite && opt.nan_policy == "error")
    throw std::runtime_error("non-finite loss (" + std::to_string(output.loss.item<double>()) +
                             ") at epoch " + std::to_string(state.epoch) + ", batch " +
                             std::to_string(state.batch_idx) + ", optimizer step " +
                             std::to_string(state.optimizer_step) +
                             "; set trainer.nan_policy = \"skip\" to skip such steps");
  if (finite) {
    backward_loss = output.loss;
    run_stage(Stage::backward);
    emit(Point::after_backward);
    state.stepped = run_stage(Stage::optimizer_step);
    if (state.stepped) ++state.optimizer_step;
    run_stage(Stage::zero_grad);
    epoch_losses.push_back(output.loss.detach());
  } else {
    ++state.skipped_steps;
    run_stage(Stage::zero_grad);
  }
  ++state.micro_step;
  state.samples_seen += state.batch_size * state.num_processes;
  samples_this_run += state.batch_size * state.num_processes;
  // The step's record is written before after_step, so that a hook there (a checkpoint) sees
  // the step complete, its record included.
  maybe_log_step();
  emit(Point::after_step);
}

// Mean of this epoch's losses from index `from` on, over all ranks when data-parallel (every
// rank logs at the same steps, with as many losses), so records show the global batch's loss.
double Trainer::Impl::mean_loss(std::size_t from) {
  auto local = torch::stack(at::TensorList(epoch_losses).slice(from));
  if (!all_reduce || state.num_processes <= 1) return local.mean().item<double>();
  auto packed = torch::stack({local.sum().to(torch::kDouble),
                              torch::scalar_tensor(static_cast<double>(local.size(0)),
                                                   local.options().dtype(torch::kDouble))})
                    .cpu();
  all_reduce(packed);
  return packed[0].item<double>() / packed[1].item<double>();
}

void Trainer::Impl::maybe_log_step() {
  if (opt.log_every <= 0 || state.micro_step % opt.log_every != 0 ||
      epoch_losses.size() <= logged_upto)
    return;
  Record r;
  r.kind = Record::Kind::step;
  r.values.emplace_back("train/loss", mean_loss(logged_upto));
  r.values.emplace_back("lr", current_lr());
  logged_upto = epoch_losses.size();
  write_record(std::move(r));
}

void Trainer::Impl::train_epoch(std::int64_t first_batch) {
  model->train();
  state.phase = Phase::train;
  const std::int64_t n = train_ds->size();
  at::Tensor order = epoch_order(state.epoch, n, opt.shuffle, /*pad=*/true);
  const std::int64_t local = order.size(0), bs = opt.batch_size;
  const std::int64_t nb = opt.drop_last ? local / bs : (local + bs - 1) / bs;
  state.batches_in_epoch = nb;
  state.batch_idx = first_batch;
  epoch_losses.clear();
  epoch_losses.reserve(static_cast<std::size_t>(nb));
  logged_upto = 0;
  if (first_batch > 0 && resume_losses.defined()) {
    // Resumed mid-epoch: the epoch's earlier losses count in its records as they would have.
    for (std::int64_t i = 0; i < resume_losses.size(0); ++i)
      epoch_losses.push_back(resume_losses[i]);
    logged_upto = std::min(resume_logged, epoch_losses.size());
  }
  resume_losses = at::Tensor();

  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  try {
    emit(Point::before_epoch);  // a CancelEpoch here skips this epoch's training
    for (std::int64_t b = first_batch; b < nb; ++b) {
      if (interrupt_requested()) throw Interrupted{};
      state.batch_idx = b;
      try {
        train_step(order.slice(0, b * bs, std::min(local, (b + 1) * bs)));
      } catch (const CancelStep&) {
        ++cancelled_steps;
        emit(Point::after_cancel);
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
    ++cancelled_epochs;
    emit(Point::after_cancel);
  }
  train_seconds += seconds_since(t0);
  train_cpu_seconds += process_cpu_seconds() - c0;
}

ValidResult Trainer::Impl::validation() {
  ValidResult res;
  if (!valid_ds) return res;
  torch::NoGradGuard no_grad;
  model->eval();
  state.phase = Phase::valid;
  const std::int64_t saved_batch = state.batch_idx, saved_nb = state.batches_in_epoch;
  const std::int64_t n = valid_ds->size();
  at::Tensor order = epoch_order(0, n, /*shuffle=*/false, /*pad=*/false);
  const std::int64_t local = order.size(0);
  const std::int64_t bs = opt.valid_batch_size > 0 ? opt.valid_batch_size : opt.batch_size;
  state.batches_in_epoch = (local + bs - 1) / bs;
  state.batch_idx = 0;

  at::Tensor loss_sum;
  std::vector<std::string> names;
  std::vector<at::Tensor> sums;
  std::int64_t count = 0;
  // CancelStep skips one validation batch, CancelEpoch the rest of this validation.
  try {
    emit(Point::before_valid);
    for (std::int64_t b = 0; b < state.batches_in_epoch; ++b) {
      state.batch_idx = b;
      try {
        auto idx = order.slice(0, b * bs, std::min(local, (b + 1) * bs));
        const std::int64_t m = idx.size(0);
        batch = to_device(valid_ds->get(idx));
        state.batch_size = m;
        emit(Point::before_step);
        current_where = "task eval_step";
        output = task->eval_step(batch);
        emit(Point::after_pred);
        emit(Point::after_loss);
        auto l = output.loss.detach().to(torch::kDouble) * static_cast<double>(m);
        loss_sum = loss_sum.defined() ? loss_sum + l : l;
        if (names.empty()) {
          for (const auto& [k, v] : output.metrics) {
            names.push_back(k);
            sums.push_back(v.detach().to(torch::kDouble) * static_cast<double>(m));
          }
        } else {
          for (std::size_t k = 0; k < names.size() && k < output.metrics.size(); ++k)
            sums[k] = sums[k] +
                      output.metrics[k].second.detach().to(torch::kDouble) * static_cast<double>(m);
        }
        count += m;
        emit(Point::after_step);
      } catch (const CancelStep&) {
        ++cancelled_steps;
        emit(Point::after_cancel);
      }
    }
  } catch (const CancelEpoch&) {
    ++cancelled_epochs;
    emit(Point::after_cancel);
  }
  // One device sync for the whole validation; one all-reduce across ranks when data-parallel.
  std::vector<at::Tensor> parts;
  parts.push_back(loss_sum.defined() ? loss_sum.reshape({1}).cpu()
                                     : torch::zeros({1}, torch::kDouble));
  for (auto& s : sums) parts.push_back(s.reshape({1}).cpu());
  parts.push_back(torch::full({1}, static_cast<double>(count), torch::kDouble));
  auto packed = torch::cat(parts);
  if (all_reduce && state.num_processes > 1) all_reduce(packed);
  auto acc = packed.accessor<double, 1>();
  const double total = acc[packed.size(0) - 1];
  res.samples = static_cast<std::int64_t>(total);
  if (total > 0) {
    res.values.emplace_back("valid/loss", acc[0] / total);
    for (std::size_t k = 0; k < names.size(); ++k)
      res.values.emplace_back("valid/" + names[k], acc[static_cast<std::int64_t>(k) + 1] / total);
  }
  model->train();
  state.phase = Phase::train;
  state.batch_idx = saved_batch;
  state.batches_in_epoch = saved_nb;
  return res;
}

void Trainer::Impl::open_outputs() {
  if (!opt.write_outputs) return;
  const fs::path dir(run.output_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("cannot create output_dir '" + dir.string() + "': " + ec.message() +
                             "; set trainer.output_dir to a writable folder");
  // Data-parallel ranks share the run directory; rank 0 writes it (the metrics are reduced).
  if (state.rank != 0) return;
  const fs::path file = dir / "metrics.jsonl";
  // A resumed run appends to the history it continues; a new run starts it afresh.
  metrics_out.open(file, run.resume.empty() ? std::ios::trunc : std::ios::app);
  if (!metrics_out)
    throw std::runtime_error("cannot write '" + file.string() +
                             "'; set trainer.output_dir to a writable folder");
}

FitResult Trainer::fit() {
  auto& I = *impl_;
  FitResult res;
  I.fit_start = Clock::now();
  I.stop = false;
  clear_interrupt();
  SigintScope sigint;
  I.current = nullptr;
  I.current_where = "start";
  try {
    connect();
    warn_if_reference_blas();
    I.open_outputs();
    I.current_where = "before_fit";
    I.emit(Point::before_fit);
    if (I.state.num_processes > 1 && !I.all_reduce)
      throw ConfigError("WORLD_SIZE is " + std::to_string(I.state.num_processes) +
                        " but no hook set up data-parallel training, so the ranks would train "
                        "apart; add [[hooks]] plugin = \"ddp\" to the config");
    if (!I.run.resume.empty() && !I.resumed)
      throw std::runtime_error("--resume " + I.run.resume +
                               " was given but no hook restored a checkpoint; enable one with "
                               "[[hooks]] plugin = \"checkpoint\"");
    for (std::int64_t e = I.start_epoch; e < I.opt.epochs; ++e) {
      I.state.epoch = e;
      const auto t_epoch = Clock::now();
      const auto samples_before = I.samples_this_run;
      I.train_epoch(e == I.start_epoch ? I.start_batch : 0);
      if (interrupt_requested()) throw Interrupted{};
      I.last_valid = I.validation();
      Record r;
      r.kind = Record::Kind::epoch;
      if (!I.epoch_losses.empty()) r.values.emplace_back("train/loss", I.mean_loss(0));
      for (const auto& kv : I.last_valid.values) r.values.push_back(kv);
      r.values.emplace_back("lr", I.current_lr());
      const double dt = seconds_since(t_epoch);
      r.values.emplace_back("epoch_time_s", dt);
      r.values.emplace_back(
          "samples_per_s",
          dt > 0 ? static_cast<double>(I.samples_this_run - samples_before) / dt : 0.0);
      I.write_record(std::move(r));
      I.emit(Point::after_epoch);
      I.state.batch_idx = 0;
      // A Ctrl-C during validation or after_epoch (the last epoch's included) still counts.
      if (interrupt_requested()) throw Interrupted{};
      if (I.agreed_stop(true)) break;
    }
    I.emit(Point::after_fit);
    res.stop_reason = I.stop_reason;
  } catch (const CancelFit&) {
    res.status = FitResult::Status::cancelled;
    res.stop_reason = I.blame("CancelFit");
  } catch (const Interrupted&) {
    res.status = FitResult::Status::cancelled;
    res.interrupted = true;
    res.stop_reason = "interrupted (SIGINT)";
  } catch (const Cancel& c) {
    // A CancelStep or CancelEpoch thrown outside its scope (e.g. in before_fit) ends the fit.
    res.status = FitResult::Status::cancelled;
    res.stop_reason = I.blame(c.what());
  } catch (const std::exception& e) {
    res.status = FitResult::Status::failed;
    res.error = I.blame(e.what());
  }
  if (res.status != FitResult::Status::completed) {
    // after_cancel runs once on the way out; an error inside it is reported, not rethrown.
    try {
      I.ending = &res;
      I.emit(Point::after_cancel);
      I.ending = nullptr;
    } catch (const std::exception& e) {
      std::string msg = I.blame(e.what());
      if (res.error.empty())
        res.error = msg;
      else
        res.error += "; then " + msg;
      res.status = FitResult::Status::failed;
    } catch (...) {
    }
    I.ending = nullptr;
  }
  I.current = nullptr;
  if (I.opt.write_outputs && !I.run.output_dir.empty()) {
    Summary s;
    s.status = to_string(res.status);
    s.error = res.error;
    s.stop_reason = res.stop_reason;
    s.epochs = I.state.epoch + (res.status == FitResult::Status::completed ? 1 : 0);
    if (I.start_epoch >= I.opt.epochs) s.epochs = I.opt.epochs;
    s.optimizer_steps = I.state.optimizer_step;
    s.micro_steps = I.state.micro_step;
    s.samples_seen = I.state.samples_seen;
    s.skipped_steps = I.state.skipped_steps;
    s.cancelled_steps = I.cancelled_steps;
    s.cancelled_epochs = I.cancelled_epochs;
    s.num_processes = I.state.num_processes;
    s.wall_s = seconds_since(I.fit_start);
    s.train_samples_per_s =
        I.train_seconds > 0 ? static_cast<double>(I.samples_this_run) / I.train_seconds : 0.0;
    s.valid = I.last_valid.values;
    s.train_cpu_s = I.train_cpu_seconds;
    try {
      s.model_fingerprint = model_fingerprint();
    } catch (...) {
    }
    try {
      if (I.state.rank == 0) write_summary(fs::path(I.run.output_dir) / "summary.json", s);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "wick: %s\n", e.what());
    }
  }
  return res;
}

ValidResult Trainer::validate() {
  connect();
  return impl_->validation();
}

// ---- Context methods that need the trainer ------------------------------------------------

void Context::log(std::string_view key, double value) {
  auto& pending = trainer_->impl_->pending;
  for (auto& [k, v] : pending)
    if (k == key) {
      v = value;
      return;
    }
  pending.emplace_back(std::string(key), value);
}

void Context::log(std::string_view key, const at::Tensor& scalar) {
  auto& pending = trainer_->impl_->pending;
  for (auto& [k, v] : pending)
    if (k == key) {
      v = scalar.detach();
      return;
    }
  pending.emplace_back(std::string(key), scalar.detach());
}

void Context::request_stop(std::string_view reason) {
  auto& I = *trainer_->impl_;
  if (!I.stop) I.stop_reason = std::string(reason);
  I.stop = true;
}

bool Context::stop_requested() const {
  return trainer_->impl_->stop;
}
const Record& Context::last_record() const {
  return trainer_->impl_->last_record;
}

std::unique_ptr<Trainer> make_trainer(const Config& cfg, const PluginFinder& finder, RunInfo run) {
  // Hooks first: they are cheap to build and their config errors should not wait for data.
  auto hooks = cfg.make_hooks(finder);
  auto task = cfg.make_task(finder);
  OptimizerOptions o = cfg.optimizer();
  if (!cfg.has_optimizer()) {
    auto d = task->default_optimizer();
    o.name = d.name;
    o.lr = d.lr;
  }
  run.config_path = cfg.path();
  auto t = std::make_unique<Trainer>(cfg.trainer(), std::move(task), o, std::move(run));
  for (auto& h : hooks) t->add_hook(std::move(h));
  return t;
}

}  // namespace wick
