// Private: trainer.nan_policy = "error" without a host sync per step. Each loss a training
// step takes backward is kept (a reference, no copy) with the step it came from, and the kept
// losses are read together when the weights must be trusted: before a step record, a
// checkpoint, the final weights and at the end of an epoch's training, and when 1024 are kept.
// On a GPU, reading a loss waits for the step that made it; read in batches, the steps do not
// wait. The error then comes up to trainer.log_every steps late but names the step it was.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported with the step engine, for its unit tests.
WICK_PUBLIC_BEGIN

namespace wick {

class LossCheck {
 public:
  struct From {
    std::int64_t epoch = 0, batch = 0, optimizer_step = 0;
    std::string optimizer;  // named when the run has several
  };
  void add(const at::Tensor& loss, From from);
  // Throws std::runtime_error naming the first kept loss that is not finite (and remembers
  // it: failed()); forgets the kept losses when all are finite. across_ranks = false: this
  // rank's alone, where it may be the only one to check (rank 0's saves); with ranks, such a
  // read keeps them all the same, so that every rank keeps as many for the agreed reads.
  void verify(bool across_ranks = true);
  // With several ranks, which call verify() at the same points (a record, a checkpoint, an
  // epoch's end, the bound on kept losses): each rank's first non-finite loss is summed over
  // the ranks by `sum_over_ranks`, and every rank throws, naming the rank and the step of the
  // earliest, so that none is left waiting in a collective for a rank that stopped, and rank
  // 0's summary says why. world <= 1: each process on its own.
  void agree_over_ranks(std::int64_t rank, std::int64_t world,
                        std::function<void(at::Tensor&)> sum_over_ranks);
  // A verify() found a non-finite loss: the weights have taken steps from it since.
  bool failed() const { return failed_; }

 private:
  std::vector<at::Tensor> losses_;
  std::vector<From> from_;
  bool failed_ = false;
  std::int64_t rank_ = 0, world_ = 1;
  std::function<void(at::Tensor&)> sum_over_ranks_;
};

}  // namespace wick

WICK_PUBLIC_END
