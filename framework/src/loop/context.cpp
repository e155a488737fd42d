// The host's services as plugins reach them through the Context: each goes to one component
// of the loop, through Context::Host (context_host.hpp).
#include "loop/context_host.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace wick {

const StepState& Context::state() const {
  return host_->state;
}
const RunInfo& Context::run() const {
  return host_->run;
}
Batch& Context::batch() {
  return host_->steps.batch;
}
Output& Context::output() {
  return host_->steps.output;
}
void Context::set_extra(const std::string& name, const at::Tensor& t) {
  auto& extras = host_->steps.extras;
  for (auto& [k, v] : extras)
    if (k == name) {
      v = t;
      return;
    }
  extras.emplace_back(name, t);
}
bool Context::has_extra(const std::string& name) const {
  for (const auto& [k, v] : host_->steps.extras)
    if (k == name) return true;
  return false;
}
const at::Tensor& Context::extra(const std::string& name) const {
  std::string set;
  for (const auto& [k, v] : host_->steps.extras) {
    if (k == name) return v;
    set += (set.empty() ? "'" : ", '") + k + "'";
  }
  throw std::invalid_argument("Context::extra(\"" + name +
                              "\"): this step's forward set no extra " + "of that name (" +
                              (set.empty() ? "it set none" : "it set " + set) +
                              "); call ctx.set_extra(\"" + name + "\", tensor) in forward");
}
at::Tensor& Context::backward_loss() {
  return host_->steps.backward_loss;
}
torch::nn::Module& Context::model() {
  return *host_->model;
}
Task& Context::task() {
  return *host_->task;
}
Task* Context::task_ptr() {
  return host_->task.get();
}
torch::optim::Optimizer& Context::optimizer() {
  return *host_->steps.current_optimizer().optimizer;
}
const std::string& Context::optimizer_name() const {
  return host_->steps.current_optimizer().name;
}
std::vector<std::string> Context::optimizer_names() const {
  std::vector<std::string> out;
  for (const auto& o : host_->optimizers) out.push_back(o.name);
  return out;
}
torch::optim::Optimizer& Context::optimizer(std::string_view name) {
  return *host_->optimizers[optimizer_index(host_->optimizers, name)].optimizer;
}
double Context::configured_lr(std::string_view optimizer, std::size_t group) const {
  const auto& o = host_->optimizers[optimizer_index(host_->optimizers, optimizer)];
  if (group >= o.configured.size())
    throw std::invalid_argument("optimizer '" + o.name + "' has " +
                                std::to_string(o.configured.size()) +
                                " parameter group(s); there is no group " + std::to_string(group));
  return o.configured[group]->get_lr();
}

void Context::backward(const at::Tensor& loss, std::string_view optimizer) {
  host_->steps.manual_backward(loss, optimizer);
}
bool Context::step(std::string_view optimizer) {
  return host_->steps.manual_step(optimizer);
}
void Context::zero_grad(std::string_view optimizer) {
  host_->steps.manual_zero_grad(optimizer);
}
at::Tensor Context::recompute_loss() {
  return host_->steps.handler_recompute_loss();
}

void Context::set_accumulation(std::int64_t steps) {
  if (steps < 1) throw std::invalid_argument("set_accumulation: steps must be >= 1");
  host_->state.grad_accum_steps = steps;
}
void Context::count_skipped_step() {
  ++host_->state.skipped_steps;
}

void Context::log(std::string_view key, double value) {
  host_->records.log(key, value);
}
void Context::log(std::string_view key, const at::Tensor& scalar) {
  host_->records.log(key, scalar);
}
const Record& Context::last_record() const {
  return host_->records.last();
}
Profile Context::profile() const {
  Profiler* p = host_->dispatch.profiler();
  return p ? p->snapshot(Profiler::since(host_->times.fit_start)) : Profile{};
}

MemoryProfile Context::memory_profile() const {
  const Profiler* p = host_->dispatch.profiler();
  return p ? p->memory.snapshot() : MemoryProfile{};
}

void Context::request_stop(std::string_view reason) {
  host_->stops.request(reason, /*from_hook=*/true);
}
bool Context::stop_requested() const {
  return host_->stops.requested;
}
const CancelInfo* Context::cancellation() const {
  return host_->stops.cancel;
}

void Context::set_collectives(Collectives* c) {
  host_->dp.set_collectives(c);
}
void Context::set_sharded_state(ShardedState* s) {
  host_->dp.set_sharded_state(s);
}
void Context::set_data_parallel(DataParallelStrategy* s) {
  host_->dp.set_strategy(s);
}
ShardedState* Context::sharded_state() const {
  return host_->dp.sharded_state();
}
Collectives* Context::collectives() const {
  return host_->dp.collectives();
}
void Context::barrier() {
  host_->dp.barrier();
}

Position Context::position() const {
  return host_->loop.pos;
}
std::int64_t Context::whole_epoch_batches() const {
  return host_->loop.whole_epoch_batches;
}
bool Context::between_steps() const {
  const LoopPhase p = host_->loop.phase;
  return (p == LoopPhase::before_fit || p == LoopPhase::fit) && host_->state.training();
}

CheckpointInfo Context::save_checkpoint(const std::string& folder, const std::string& reason) {
  return host_->checkpoints.save_checkpoint(folder, reason);
}
CheckpointInfo Context::inspect_checkpoint(const std::string& folder) const {
  return host_->checkpoints.inspect_checkpoint(folder);
}
CheckpointInfo Context::restore_checkpoint(const std::string& folder) {
  return host_->checkpoints.restore_checkpoint(folder);
}

}  // namespace wick
