// The deferred loss check (loss_check.hpp).
#include "loop/loss_check.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace wick {

namespace {
// A bound on the losses kept between reads (a 0-dim tensor each; a caching allocator's block
// on a GPU): one read per this many steps when no record, checkpoint or epoch end comes first.
constexpr std::size_t kMaxKept = 1024;

// "nan" whatever its sign bit ("-nan" from std::to_string).
std::string value_text(double v) {
  return std::isnan(v) ? "nan" : std::isinf(v) ? (v > 0 ? "inf" : "-inf") : std::to_string(v);
}
}  // namespace

void LossCheck::add(const at::Tensor& loss, From from) {
  losses_.push_back(loss.detach());
  from_.push_back(std::move(from));
  if (losses_.size() >= kMaxKept) verify();
}

void LossCheck::agree_over_ranks(std::int64_t rank, std::int64_t world,
                                 std::function<void(at::Tensor&)> sum_over_ranks) {
  rank_ = rank;
  world_ = world;
  sum_over_ranks_ = std::move(sum_over_ranks);
}

void LossCheck::verify(bool across_ranks) {
  const bool alone = world_ <= 1 || !sum_over_ranks_;
  const bool agreed = across_ranks && !alone;
  if (losses_.empty() && !agreed) return;  // agreed, this rank's part is due all the same
  std::int64_t bad = -1;                   // the first kept loss that is not finite
  if (!losses_.empty()) {
    std::vector<at::Tensor> flat;
    flat.reserve(losses_.size());
    for (const auto& l : losses_) flat.push_back(l.reshape({-1}).to(at::kFloat));
    const at::Tensor finite = at::cat(flat).isfinite();
    if (!finite.all().item<bool>())  // the one read of the batch
      bad = finite.logical_not().nonzero()[0][0].item<std::int64_t>();
  }
  double value = bad >= 0 ? losses_[static_cast<std::size_t>(bad)].item<double>() : 0.0;
  std::int64_t from_rank = bad >= 0 ? rank_ : -1;
  if (agreed) {
    // Each rank's first bad position (+1, 0: none) and its value. Every rank keeps the same
    // steps (only agreed reads forget them), so the earliest position is the earliest step.
    auto t = at::zeros({2 * world_}, at::kDouble);
    if (bad >= 0) {
      t.data_ptr<double>()[rank_] = static_cast<double>(bad + 1);
      t.data_ptr<double>()[world_ + rank_] = value;
    }
    sum_over_ranks_(t);
    const double* v = t.data_ptr<double>();
    from_rank = -1;
    for (std::int64_t r = 0; r < world_; ++r)
      if (v[r] > 0 && (from_rank < 0 || v[r] < v[from_rank])) from_rank = r;
    if (from_rank >= 0) {
      bad = static_cast<std::int64_t>(v[from_rank]) - 1;
      value = v[world_ + from_rank];
    }
  }
  if (from_rank < 0) {
    // A rank's own read keeps them for the next agreed one, so that the ranks keep as many
    // (and reach the bound together).
    if (agreed || alone) {
      losses_.clear();
      from_.clear();
    }
    return;
  }
  std::string failure = "non-finite loss (" + value_text(value) + ")", found;
  if (bad < static_cast<std::int64_t>(from_.size())) {
    const From& f = from_[static_cast<std::size_t>(bad)];
    failure += (f.optimizer.empty() ? "" : " for optimizer '" + f.optimizer + "'") +
               (agreed ? " on rank " + std::to_string(from_rank) : "") + " at epoch " +
               std::to_string(f.epoch) + ", batch " + std::to_string(f.batch) +
               ", optimizer step " + std::to_string(f.optimizer_step);
    if (from_.back().batch != f.batch || from_.back().epoch != f.epoch)
      found = " (found at batch " + std::to_string(from_.back().batch) +
              ": under \"error\" the losses are read in batches, with the step records, so "
              "that no step waits for its loss)";
  } else {  // a rank that kept fewer (not expected): no step to name
    failure += " on rank " + std::to_string(from_rank);
  }
  failure += "; set trainer.nan_policy = \"skip\" to skip such steps" + found;
  losses_.clear();
  from_.clear();
  failed_ = true;
  throw std::runtime_error(failure);
}

}  // namespace wick
