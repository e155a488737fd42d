// The trainer's data-parallel strategy: its checks and wick's own group outside a fit.
#include "dist/data_parallel.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>

#include "dist/ranks.hpp"
#include "wick/params.hpp"  // ConfigError

namespace wick {

void DataParallel::all_reduce_sum(at::Tensor& t) const {
  if (distributed()) collectives_->all_reduce_sum(t);
}

std::pair<std::int64_t, int> DataParallel::first_signal(int mine) const {
  auto sigs = at::zeros({world()}, at::kDouble);
  sigs.data_ptr<double>()[rank()] = mine;
  collectives_->all_reduce_sum(sigs);
  const double* v = sigs.data_ptr<double>();
  for (std::int64_t r = 0; r < world(); ++r)
    if (v[r] != 0) return {r, static_cast<int>(v[r])};
  return {-1, 0};
}

DataParallel::WholeState::WholeState(const DataParallel& dp, Whole what) : dp_(dp), what_(what) {
  if (dp_.strategy_)
    dp_.strategy_->gather_whole(what_);
  else if (dp_.sharded_ && what_ == Whole::training_state)
    dp_.sharded_->gather_for_save();
  ++dp_.gathered_;
}

DataParallel::WholeState::~WholeState() {
  --dp_.gathered_;
  if (dp_.strategy_)
    dp_.strategy_->release_whole(what_);
  else if (dp_.sharded_ && what_ == Whole::training_state)
    dp_.sharded_->release_after_save();  // local work only; it does not throw
}

void DataParallel::check_fit() const {
  if (job_.world > 1 && !collectives_)
    throw ConfigError("WORLD_SIZE is " + std::to_string(job_.world) +
                      " but no hook set up data-parallel training, so the ranks would train "
                      "apart; add [[hooks]] plugin = \"ddp\" to the config");
}

void DataParallel::join_if_needed() {
  if (job_.world <= 1 || collectives_) return;
  own_ = join_ranks(job_.rank, job_.world);
  collectives_ = own_.get();
}

}  // namespace wick
