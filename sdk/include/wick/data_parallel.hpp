// A data-parallel strategy (since SDK 2.11): how the ranks of a run share the training, as one
// interface a plugin implements (ddp, with its ZeRO-1/2 sharding; zero3). It installs itself in
// before_fit with Context::set_data_parallel, which makes it the run's Collectives too.
//
// The framework reads the whole model through it and nothing else: around a checkpoint save
// (the training state), the validation pass and the fit's end (final weights, fingerprint,
// after_fit) it asks for the state whole, on every rank at the same point, and releases it
// after. A strategy that keeps parameters or optimizer state sharded between steps gathers
// them then; one that keeps them replicated does nothing. `wick describe` asks each strategy
// for its own rows of the memory estimate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wick/collectives.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// One trainable parameter as the memory estimate counts it, in the model's order.
struct ParamBytes {
  std::int64_t numel = 0;
  std::int64_t bytes = 0;        // its values (and its gradient's: the same)
  std::int64_t state_bytes = 0;  // its optimizer's state
};

// One row of the estimate: bytes one rank holds (the rank with the largest share).
struct MemoryRow {
  std::string setting;  // "1 process", "ddp", "zero3", ...
  std::int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  std::int64_t total() const { return parameters + gradients + optimizer_state; }
};

class DataParallelStrategy : public Collectives {
 public:
  // What a caller needs whole.
  enum class Whole : std::uint8_t {
    weights,         // every parameter's value in the model, on every rank
    training_state,  // the weights, and rank 0's optimizers holding every parameter's state
  };
  // Collective: every rank calls it at the same point. Until the matching release_whole the
  // model (and, for training_state, rank 0's optimizers) hold the whole state, as one
  // unsharded process would. Calls nest: each is matched by one release_whole(what).
  virtual void gather_whole(Whole what) = 0;
  // Back to this rank's share. Local work only: it must not throw.
  virtual void release_whole(Whole what) noexcept = 0;
  // Whether gradients and optimizer state are sharded between steps: then a quantity over all
  // gradients is each rank's part combined with all_reduce_sum (Context::sharded_state() is
  // not null for hooks such as grad_clip and mixed_precision).
  virtual bool sharded() const = 0;
  // This strategy's rows of `wick describe`'s memory estimate at `ranks` ranks. `trainable`:
  // the trainable parameters in the model's order; `other_bytes`: frozen parameters and
  // buffers (replicated on every rank by either strategy of wick's).
  virtual std::vector<MemoryRow> memory_rows(const std::vector<ParamBytes>& trainable,
                                             std::int64_t other_bytes, int ranks) const = 0;
};

}  // namespace wick

WICK_PUBLIC_END
