// Private: the trainer's one data-parallel strategy. The job's ranks come from job_ranks()
// (RANK and WORLD_SIZE, read and checked once); a data-parallel hook (ddp) installs its
// collectives, and its sharded optimizer state when it shards it, through the Context; outside
// a fit (evaluate, predict) with several ranks and no such hook, wick joins the ranks in a
// Gloo group of its own. Everything in the loop that talks across ranks goes through here.
#pragma once

#include <cstdint>
#include <memory>

#include "wick/cluster.hpp"
#include "wick/collectives.hpp"
#include "wick/sharded_state.hpp"

namespace at {
class Tensor;
}

namespace wick {

class DataParallel {
 public:
  explicit DataParallel(JobRanks job = job_ranks()) : job_(job) {}

  std::int64_t world() const { return job_.world; }
  std::int64_t rank() const { return job_.rank; }
  // Several ranks, and collectives to reach them.
  bool distributed() const { return collectives_ && job_.world > 1; }

  Collectives* collectives() const { return collectives_; }
  void set_collectives(Collectives* c) { collectives_ = c; }
  ShardedState* sharded_state() const { return sharded_; }
  void set_sharded_state(ShardedState* s) { sharded_ = s; }

  // Sums t over the ranks, in place; nothing with one rank.
  void all_reduce_sum(at::Tensor& t) const;
  // Whether to stop: `mine` agreed on by every rank (any rank's request stops all).
  bool agree_stop(bool mine, bool epoch_end) const {
    return collectives_ ? collectives_->agree_stop(mine, epoch_end) : mine;
  }
  void barrier() const {
    if (collectives_) collectives_->barrier();
  }
  // A fit with several ranks needs a hook's collectives, or the ranks would train apart:
  // throws ConfigError saying so.
  void check_fit() const;
  // Outside a fit, several ranks and no hook's collectives: wick's own Gloo group.
  void join_if_needed();

 private:
  JobRanks job_;
  Collectives* collectives_ = nullptr;
  ShardedState* sharded_ = nullptr;
  std::unique_ptr<Collectives> own_;  // join_if_needed's (dist/ranks.hpp)
};

}  // namespace wick
