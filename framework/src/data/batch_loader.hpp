// Private: loads an epoch's batches, on the main thread (0 workers) or ahead of the step on
// N threads, handing them out strictly in batch order.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "wick/state.hpp"
#include "wick/state_dict.hpp"
#include "wick/task.hpp"

namespace wick {

// What one epoch (or one validation) loads: batches [first, end) of `ds`, each cut by
// indices(b), each with a Fetch seeded from (seed, phase, epoch, b).
struct LoadPlan {
  Dataset* ds = nullptr;
  Phase phase = Phase::train;
  std::int64_t seed = 0;
  std::int64_t epoch = 0;
  std::int64_t first = 0, end = 0;
  std::function<at::Tensor(std::int64_t)> indices;  // called on the main thread only
  const char* what = "the training data";           // for error messages
  // The batches go to a CUDA device: each is put in page-locked memory as it is loaded (on the
  // loading thread), so that its copy to the GPU can overlap the step before it.
  bool pin = false;
};

struct Loaded {
  Batch batch;
  std::shared_ptr<StateDict> state;  // the dataset's state after this get() (has_state())
};

// One batch, on the calling thread: fetch_generator() answers during the get(); a failure
// names the batch, its first sample indices and the dataset's message.
Loaded load_batch(const LoadPlan& plan, std::int64_t b, const at::Tensor& indices);

// Where a training step takes its batch from: a BatchLoader, or a unit test's own.
class BatchSource {
 public:
  // The number of samples of batch b (known without loading it).
  virtual std::int64_t size_of(std::int64_t b) const = 0;
  // Batch b; b never goes back.
  virtual Loaded take(std::int64_t b) = 0;

 protected:
  ~BatchSource() = default;
};

class BatchLoader final : public BatchSource {
 public:
  // Starts `workers` threads (0: none; take() loads on the calling thread) that keep up to
  // 2 * workers batches ready ahead of the one take() waits for.
  BatchLoader(LoadPlan plan, std::int64_t workers);
  // Stops and joins the threads (a batch being loaded is finished first, then dropped).
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  std::int64_t size_of(std::int64_t b) const override;
  // Batches skipped over (a cancelled step) are dropped; a worker's failure of batch b is
  // rethrown.
  Loaded take(std::int64_t b) override;

 private:
  struct Slot {
    bool done = false;
    Loaded value;
    std::exception_ptr error;
  };
  void work();
  void stop_threads();  // asks the threads to end and joins them

  LoadPlan plan_;
  std::vector<at::Tensor> indices_;  // [b - first], cut on the main thread up front
  std::int64_t capacity_ = 0;
  bool ordered_ = false;  // a stateful dataset: one get() at a time, in batch order

  std::mutex mu_;
  std::condition_variable ready_, room_;
  std::map<std::int64_t, Slot> slots_;
  std::int64_t next_claim_ = 0;  // the next batch a worker takes
  std::int64_t wanted_ = 0;      // the batch take() needs next
  bool stop_ = false;
  std::mutex order_mu_;
  std::vector<std::thread> threads_;
};

}  // namespace wick
