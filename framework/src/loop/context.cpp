// The host's services as plugins reach them through the Context.
#include <cstdio>
#include <filesystem>

#include "loop/trainer_impl.hpp"

namespace wick {

namespace fs = std::filesystem;

namespace {
Trainer::Impl& impl(Context::Host* h) {
  return *static_cast<Trainer::Impl*>(h);
}
}  // namespace

const StepState& Context::state() const {
  return impl(host_).state;
}
const RunInfo& Context::run() const {
  return impl(host_).run;
}
Batch& Context::batch() {
  return impl(host_).batch;
}
Output& Context::output() {
  return impl(host_).output;
}
at::Tensor& Context::backward_loss() {
  return impl(host_).backward_loss;
}
torch::nn::Module& Context::model() {
  return *impl(host_).model;
}
Task& Context::task() {
  return *impl(host_).task;
}
Task* Context::task_ptr() {
  return impl(host_).task.get();
}
torch::optim::Optimizer& Context::optimizer() {
  return impl(host_).optim();
}
const std::string& Context::optimizer_name() const {
  const auto& I = impl(host_);
  return I.optimizers[I.current_opt].name;
}
std::vector<std::string> Context::optimizer_names() const {
  std::vector<std::string> out;
  for (const auto& o : impl(host_).optimizers) out.push_back(o.name);
  return out;
}
torch::optim::Optimizer& Context::optimizer(std::string_view name) {
  auto& I = impl(host_);
  return *I.optimizers[I.optimizer_index(name)].optimizer;
}

namespace {
Trainer::Impl& manual_step(Context::Host* h, const char* call) {
  auto& I = impl(h);
  if (!I.manual || !I.in_step() || !I.state.training())
    throw std::logic_error(std::string("Context::") + call +
                           " is for a task's train_step under manual optimization "
                           "(Task::manual_optimization() returning true)");
  return I;
}
}  // namespace

void Context::backward(const at::Tensor& loss, std::string_view optimizer) {
  auto& I = manual_step(host_, "backward");
  I.backward(loss, I.optimizer_index(optimizer));
}
bool Context::step(std::string_view optimizer) {
  auto& I = manual_step(host_, "step");
  const bool stepped = I.step_optimizer(I.optimizer_index(optimizer));
  if (stepped) I.state.stepped = true;
  return stepped;
}
void Context::zero_grad(std::string_view optimizer) {
  auto& I = manual_step(host_, "zero_grad");
  I.zero_grad_optimizer(I.optimizer_index(optimizer));
}

at::Tensor Context::recompute_loss() {
  auto& I = impl(host_);
  if (I.manual || I.phase != LoopPhase::step || !I.state.training())
    throw std::logic_error(
        "Context::recompute_loss is for an optimizer_step handler of a training step (not "
        "under manual optimization, not inside another recompute_loss)");
  return I.recompute_loss();
}

void Context::set_accumulation(std::int64_t steps) {
  if (steps < 1) throw std::invalid_argument("set_accumulation: steps must be >= 1");
  impl(host_).state.grad_accum_steps = steps;
}
void Context::count_skipped_step() {
  ++impl(host_).state.skipped_steps;
}

void Context::log(std::string_view key, double value) {
  impl(host_).records.log(key, value);
}
void Context::log(std::string_view key, const at::Tensor& scalar) {
  impl(host_).records.log(key, scalar);
}
const Record& Context::last_record() const {
  return impl(host_).records.last();
}
Profile Context::profile() const {
  auto& I = impl(host_);
  const Profiler* p = I.dispatch.profiler();
  return p ? p->snapshot(Profiler::since(I.times.fit_start)) : Profile{};
}

MemoryProfile Context::memory_profile() const {
  const Profiler* p = impl(host_).dispatch.profiler();
  return p ? p->memory.snapshot() : MemoryProfile{};
}

void Context::request_stop(std::string_view reason) {
  impl(host_).stops.request(reason);
}
bool Context::stop_requested() const {
  return impl(host_).stops.requested;
}
const CancelInfo* Context::cancellation() const {
  return impl(host_).cancel;
}

void Context::set_collectives(Collectives* c) {
  impl(host_).dp.set_collectives(c);
}
void Context::set_sharded_state(ShardedState* s) {
  impl(host_).dp.set_sharded_state(s);
}
ShardedState* Context::sharded_state() const {
  return impl(host_).dp.sharded_state();
}
Collectives* Context::collectives() const {
  return impl(host_).dp.collectives();
}
void Context::barrier() {
  impl(host_).dp.barrier();
}

Position Context::position() const {
  return impl(host_).pos;
}
bool Context::between_steps() const {
  const auto& I = impl(host_);
  return I.phase == LoopPhase::fit && I.state.training();
}

namespace {

fs::path resolve(const Trainer::Impl& I, const std::string& folder) {
  fs::path p(folder);
  return p.is_absolute() ? p : fs::path(I.run.output_dir) / p;
}

// A position this run can continue from: inside its data (a batch index past the epoch's
// batches is a damaged or foreign checkpoint).
void check_position(const Trainer::Impl& I, const Manifest& m) {
  // The epoch as the checkpoint's run dealt it (its world size and batch size, both >= 1 as
  // read_checkpoint checked).
  const std::int64_t nb = I.train_batches({m.dealt_from_batch, m.dealt_from_sample},
                                          m.run.world_size, m.run.batch_size, m.run.drop_last);
  if (m.position.batch > nb)
    throw CheckpointError("its position (epoch " + std::to_string(m.position.epoch) + ", batch " +
                          std::to_string(m.position.batch) + ") is past the " + std::to_string(nb) +
                          " batches of an epoch of this run");
  if (m.micro_step < m.optimizer_step)
    throw CheckpointError("it counts more optimizer steps (" + std::to_string(m.optimizer_step) +
                          ") than batches (" + std::to_string(m.micro_step) + ")");
}

}  // namespace

SnapshotParts Trainer::Impl::snapshot_parts() {
  return {*model,
          optimizers,
          *task,
          *train_ds,
          data_state,
          state,
          pos,
          epoch_start,
          {opt.seed, opt.batch_size, state.num_processes, opt.shuffle, opt.drop_last},
          records.count(),
          dispatch.stateful_hooks(),
          [this](StateDict& out) {
            epoch.save(out);
            stops.save(out);
            records.save_pending(out);
          },
          [this](const StateDict& in) {
            epoch.load(in);
            stops.load(in);
            records.load_pending(in);
          }};
}

CheckpointInfo Context::save_checkpoint(const std::string& folder, const std::string& reason) {
  auto& I = impl(host_);
  const auto dir = resolve(I, folder);
  auto parts = I.snapshot_parts();
  Manifest m = snapshot_manifest(parts, reason);
  // Sharded optimizer state is gathered to rank 0 for the save, and released after it (on
  // every process, whether rank 0's write succeeds or not).
  struct Gathered {
    ShardedState* s;
    explicit Gathered(ShardedState* sh) : s(sh) {
      if (s) s->gather_for_save();
    }
    ~Gathered() {
      if (s) s->release_after_save();  // local work only; it does not throw
    }
  } gathered(I.dp.sharded_state());
  if (!I.state.is_main_process())
    return checkpoint_info(dir, m, 0);  // replicas hold the same state
  const auto bytes = write_checkpoint_folder(dir, m, snapshot_files(parts));
  return checkpoint_info(dir, m, bytes);
}

CheckpointInfo Context::inspect_checkpoint(const std::string& folder) const {
  const auto& I = impl(host_);
  const auto dir = resolve(I, folder);
  Files files;
  Manifest m = read_checkpoint(dir, &files);
  check_position(I, m);
  check_agreement(m, files);
  std::uint64_t bytes = 0;
  for (const auto& f : files) bytes += f.second.size();
  return checkpoint_info(dir, m, bytes);
}

CheckpointInfo Context::restore_checkpoint(const std::string& folder) {
  auto& I = impl(host_);
  if (I.dispatch.where() != "before_fit")
    throw std::logic_error("restore_checkpoint is only possible in before_fit");
  const auto dir = resolve(I, folder);
  const auto where = "checkpoint '" + dir.string() + "'";
  Files files;
  Manifest m;
  try {
    m = read_checkpoint(dir, &files);
    check_position(I, m);
    check_agreement(m, files);
  } catch (const CheckpointError& e) {
    throw CheckpointError("cannot resume from " + where + ": " + e.what());
  }
  // The data order is a function of (seed, epoch, shuffle): a resume with another of these
  // would not continue the same run.
  const RunIdentity now{I.opt.seed, I.opt.batch_size, I.state.num_processes, I.opt.shuffle,
                        I.opt.drop_last};
  std::string diff;
  auto cmp = [&](const char* key, auto then, auto mine) {
    if (then != mine)
      diff += "\n  " + std::string(key) + ": checkpoint " + std::to_string(then) + ", this run " +
              std::to_string(mine);
  };
  cmp("seed", m.run.seed, now.seed);
  cmp("shuffle", m.run.shuffle, now.shuffle);
  cmp("drop_last", m.run.drop_last, now.drop_last);
  const bool regeared = m.run.world_size != now.world_size || m.run.batch_size != now.batch_size;
  if (regeared && I.streaming()) {
    cmp("batch_size", m.run.batch_size, now.batch_size);
    cmp("world_size", m.run.world_size, now.world_size);
    diff += "\n  (a stream's samples are numbered by world size and batch size)";
  }
  if (!diff.empty())
    throw std::runtime_error(where + " was written by a run with other settings:" + diff +
                             "\na resume must use the checkpoint's seed, shuffle and drop_last "
                             "(they fix the data order)");
  if (m.position.epoch > I.opt.epochs)
    throw std::runtime_error(where + " is at epoch " + std::to_string(m.position.epoch) +
                             ", past this run's trainer.epochs = " + std::to_string(I.opt.epochs) +
                             "; raise trainer.epochs to continue it");
  auto parts = I.snapshot_parts();
  restore_files(parts, m, files, where);
  // The run continues its own metrics history from the checkpoint: records a killed run
  // wrote after it are dropped from metrics.jsonl and from every sink that rewinds, once
  // before_fit is over (every sink is set up by then).
  I.resume.rewind_records = m.records;
  I.resume.start = m.position;
  I.pos = m.position;
  I.resume.resumed = true;
  I.resume.mid_epoch = m.position.batch > 0;
  I.epoch_start = {m.dealt_from_batch, m.dealt_from_sample};
  if (regeared) {
    std::string rest;
    if (m.position.batch > 0) {
      // The rest of the epoch: exactly the samples of its order not yet seen, dealt to this
      // run's ranks at its batch size.
      const std::int64_t n = I.train_ds->size();
      const std::int64_t seen =
          order_consumed(n, I.epoch_start, m.position.batch, m.run.world_size, m.run.batch_size);
      I.epoch_start = {m.position.batch, seen};
      rest = "; the " + std::to_string(n - seen) + " samples of epoch " +
             std::to_string(m.position.epoch) + " not yet seen are dealt anew";
    }
    if (I.state.is_main_process())
      std::fprintf(stderr,
                   "wick: resuming a checkpoint of %lld rank(s) x batch %lld on %lld rank(s) x "
                   "batch %lld (global batch %lld -> %lld)%s\n",
                   static_cast<long long>(m.run.world_size),
                   static_cast<long long>(m.run.batch_size), static_cast<long long>(now.world_size),
                   static_cast<long long>(now.batch_size),
                   static_cast<long long>(m.run.world_size * m.run.batch_size),
                   static_cast<long long>(now.world_size * now.batch_size), rest.c_str());
  }
  std::uint64_t bytes = 0;
  for (const auto& f : files) bytes += f.second.size();
  return checkpoint_info(dir, m, bytes);
}

}  // namespace wick
