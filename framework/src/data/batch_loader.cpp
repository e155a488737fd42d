#include "data/batch_loader.hpp"

#include "cuda/cuda_support.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "data/sampler.hpp"

namespace wick {

namespace {

// The generator of the batch this thread is loading (undefined outside a get()).
thread_local at::Generator t_generator;

struct GeneratorScope {
  explicit GeneratorScope(const at::Generator& g) { t_generator = g; }
  ~GeneratorScope() { t_generator = at::Generator(); }
};

// "samples 3, 17, 42, 5, 9, ... (32 in all)": enough to find the bad record.
std::string describe_indices(const at::Tensor& indices) {
  const std::int64_t n = indices.numel(), shown = std::min<std::int64_t>(n, 5);
  auto idx = indices.to(at::kLong).contiguous();
  const auto* p = idx.data_ptr<std::int64_t>();
  std::string s = "samples ";
  for (std::int64_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(p[i]);
  if (n > shown) s += ", ... (" + std::to_string(n) + " in all)";
  return s;
}

}  // namespace

at::Generator fetch_generator() {
  if (!t_generator.defined())
    throw std::logic_error(
        "wick::fetch_generator() called outside a Dataset::get() run by the trainer");
  return t_generator;
}

Loaded load_batch(const LoadPlan& plan, std::int64_t b, const at::Tensor& indices) {
  Fetch f;
  f.phase = plan.phase;
  f.epoch = plan.epoch;
  f.batch = b;
  // One generator per loading thread, reseeded per batch: no allocation per step, and the
  // same draws for a batch whichever thread loads it.
  thread_local at::Generator gen = at::make_generator<at::CPUGeneratorImpl>();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(fetch_seed(plan.seed, plan.phase, plan.epoch, b));
  }
  f.generator = gen;
  auto fail = [&](const std::string& msg) {
    return std::runtime_error(std::string(plan.what) + " failed to load batch " +
                              std::to_string(b) + " of epoch " + std::to_string(plan.epoch) + " (" +
                              describe_indices(indices) + "): " + msg);
  };
  Loaded out;
  try {
    GeneratorScope scope(f.generator);
    out.batch = plan.ds->get(indices, f);
    // One row per index (records count samples, losses average over rows): a batch of
    // another length would train silently on what it holds.
    const std::int64_t n = indices.numel();
    for (const auto& [t, name] :
         {std::pair{&out.batch.input, "input"}, {&out.batch.target, "target"}})
      if (t->defined() && t->dim() > 0 && t->size(0) != n)
        throw std::runtime_error("get() returned " + std::to_string(t->size(0)) + " rows of " +
                                 name + " for " + std::to_string(n) +
                                 " indices; a batch holds one row per index, along its first "
                                 "dimension");
    if (plan.pin) {
      out.batch.input = cuda::pinned(out.batch.input);
      out.batch.target = cuda::pinned(out.batch.target);
    }
    if (plan.ds->has_state()) {
      out.state = std::make_shared<StateDict>();
      plan.ds->save_state(*out.state);
    }
  } catch (const std::exception& e) {
    throw fail(e.what());
  } catch (...) {
    throw fail("an exception that is not a std::exception");
  }
  return out;
}

BatchLoader::BatchLoader(LoadPlan plan, std::int64_t workers)
    : plan_(std::move(plan)), next_claim_(plan_.first), wanted_(plan_.first) {
  for (std::int64_t b = plan_.first; b < plan_.end; ++b) indices_.push_back(plan_.indices(b));
  ordered_ = plan_.ds->has_state();
  // No more threads than the batches they would load.
  workers = std::min(workers, plan_.end - plan_.first);
  capacity_ = 2 * workers;
  try {
    threads_.reserve(static_cast<std::size_t>(std::max<std::int64_t>(workers, 0)));
    for (std::int64_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  } catch (const std::exception& e) {
    // The system refused a thread (its limit on threads) or the memory for it: the ones
    // started are joined here, as no destructor runs for a half-made loader.
    stop_threads();
    throw std::runtime_error("cannot start " + std::to_string(workers) + " data loader threads (" +
                             e.what() + " after " + std::to_string(threads_.size()) +
                             "); lower trainer.num_workers");
  }
}

BatchLoader::~BatchLoader() {
  stop_threads();
}

void BatchLoader::stop_threads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  room_.notify_all();
  for (auto& t : threads_) t.join();
}

std::int64_t BatchLoader::size_of(std::int64_t b) const {
  return indices_.at(static_cast<std::size_t>(b - plan_.first)).size(0);
}

void BatchLoader::work() {
  // Loading needs no autograd; tensors made here must not record a graph.
  at::NoGradGuard no_grad;
  for (;;) {
    std::int64_t b = 0;
    // A stateful dataset sees its get() calls one at a time and in batch order: claim and
    // load under one lock, so that the state saved after batch b is the state after b.
    std::unique_lock<std::mutex> ordered;
    if (ordered_) ordered = std::unique_lock<std::mutex>(order_mu_);
    {
      std::unique_lock<std::mutex> lock(mu_);
      room_.wait(lock, [&] {
        return stop_ || next_claim_ >= plan_.end || next_claim_ < wanted_ + capacity_;
      });
      if (stop_ || next_claim_ >= plan_.end) return;
      b = next_claim_++;
    }
    Slot slot;
    try {
      slot.value = load_batch(plan_, b, indices_[static_cast<std::size_t>(b - plan_.first)]);
    } catch (...) {
      slot.error = std::current_exception();
    }
    slot.done = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (b >= wanted_) slots_[b] = std::move(slot);  // else: skipped meanwhile
    }
    ready_.notify_all();
  }
}

Loaded BatchLoader::take(std::int64_t b) {
  if (b < wanted_ || b >= plan_.end) throw std::logic_error("BatchLoader::take out of order");
  if (threads_.empty()) {
    wanted_ = b + 1;
    return load_batch(plan_, b, indices_[static_cast<std::size_t>(b - plan_.first)]);
  }
  std::unique_lock<std::mutex> lock(mu_);
  // Batches skipped over are dropped and their room given back.
  slots_.erase(slots_.begin(), slots_.lower_bound(b));
  wanted_ = b;
  next_claim_ = std::max(next_claim_, b);
  room_.notify_all();
  ready_.wait(lock, [&] {
    auto it = slots_.find(b);
    return it != slots_.end() && it->second.done;
  });
  Slot slot = std::move(slots_[b]);
  slots_.erase(b);
  wanted_ = b + 1;
  lock.unlock();
  room_.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.value);
}

}  // namespace wick
