// The deferred loss check (loss_check.hpp).
#include "loop/loss_check.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace wick {

namespace {
// A bound on the losses kept between reads (a 0-dim tensor each; a caching allocator's block
// on a GPU): one read per this many steps when no record, checkpoint or epoch end comes first.
constexpr std::size_t kMaxKept = 1024;
}  // namespace

void LossCheck::add(const at::Tensor& loss, From from) {
  losses_.push_back(loss.detach());
  from_.push_back(std::move(from));
  if (losses_.size() >= kMaxKept) verify();
}

void LossCheck::verify() {
  if (losses_.empty()) return;
  std::vector<at::Tensor> flat;
  flat.reserve(losses_.size());
  for (const auto& l : losses_) flat.push_back(l.reshape({-1}).to(at::kFloat));
  const at::Tensor finite = at::cat(flat).isfinite();
  if (finite.all().item<bool>()) {  // the one read of the batch
    losses_.clear();
    from_.clear();
    return;
  }
  const auto i =
      static_cast<std::size_t>(finite.logical_not().nonzero()[0][0].item<std::int64_t>());
  const From& f = from_[i];
  const std::int64_t read_at = from_.back().batch;
  const std::string failure =
      "non-finite loss (" + std::to_string(losses_[i].item<double>()) + ")" +
      (f.optimizer.empty() ? "" : " for optimizer '" + f.optimizer + "'") + " at epoch " +
      std::to_string(f.epoch) + ", batch " + std::to_string(f.batch) + ", optimizer step " +
      std::to_string(f.optimizer_step) + "; set trainer.nan_policy = \"skip\" to skip such steps" +
      (read_at != f.batch || from_.back().epoch != f.epoch
           ? " (found at batch " + std::to_string(read_at) +
                 ": under \"error\" the losses are read in batches, with the step "
                 "records, so that no step waits for its loss)"
           : "");
  losses_.clear();
  from_.clear();
  failed_ = true;
  throw std::runtime_error(failure);
}

}  // namespace wick
