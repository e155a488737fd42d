// Private: trainer.nan_policy = "error" without a host sync per step. Each loss a training
// step takes backward is kept (a reference, no copy) with the step it came from, and the kept
// losses are read together when the weights must be trusted: before a step record, a
// checkpoint, the final weights and at the end of an epoch's training, and when 1024 are kept.
// On a GPU, reading a loss waits for the step that made it; read in batches, the steps do not
// wait. The error then comes up to trainer.log_every steps late but names the step it was.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
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
  // it: failed()); forgets the kept losses when all are finite.
  void verify();
  // A verify() found a non-finite loss: the weights have taken steps from it since.
  bool failed() const { return failed_; }

 private:
  std::vector<at::Tensor> losses_;
  std::vector<From> from_;
  bool failed_ = false;
};

}  // namespace wick

WICK_PUBLIC_END
