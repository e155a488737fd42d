// Private: the run's data parallelism as the loop sees it. The job's ranks come from
// job_ranks() (RANK and WORLD_SIZE, read and checked once); a data-parallel hook installs its
// strategy through the Context (wick/data_parallel.hpp; ddp, zero3), or, built against SDK
// 2.10 or older, its collectives and sharded optimizer state; outside a fit (evaluate,
// predict) with several ranks and no such hook, wick joins the ranks in a Gloo group of its
// own. Everything in the loop that talks across ranks, or needs the whole model, goes
// through here.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "wick/cluster.hpp"
#include "wick/collectives.hpp"
#include "wick/data_parallel.hpp"
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
  void set_collectives(Collectives* c) {
    collectives_ = c;
    strategy_ = nullptr;
  }
  // What hooks see as Context::sharded_state(): the strategy's view when it shards.
  ShardedState* sharded_state() const {
    return strategy_ ? (strategy_->sharded() ? &strategy_view_ : nullptr) : sharded_;
  }
  void set_sharded_state(ShardedState* s) { sharded_ = s; }
  // The strategy, which is also the collectives; nullptr uninstalls both.
  void set_strategy(DataParallelStrategy* s) {
    strategy_ = s;
    strategy_view_.s = s;
    collectives_ = s;
    sharded_ = nullptr;
  }

  // The model (and for training_state rank 0's optimizers) whole while it lives: collective,
  // on every rank at the same point. Without a strategy: an older plugin's sharded optimizer
  // state for training_state, else nothing.
  using Whole = DataParallelStrategy::Whole;
  class WholeState {
   public:
    WholeState(const DataParallel& dp, Whole what);
    ~WholeState();
    WholeState(const WholeState&) = delete;
    WholeState& operator=(const WholeState&) = delete;

   private:
    const DataParallel& dp_;
    Whole what_;
  };
  WholeState whole(Whole what) const { return WholeState(*this, what); }
  // Whether the model's weights are whole on this rank now (not sharded, or gathered).
  bool weights_whole() const { return !strategy_ || !strategy_->sharded() || gathered_ > 0; }

  // Sums t over the ranks, in place; nothing with one rank.
  void all_reduce_sum(at::Tensor& t) const;
  // Whether to stop: `mine` agreed on by every rank (any rank's request stops all).
  bool agree_stop(bool mine, bool epoch_end) const {
    return collectives_ ? collectives_->agree_stop(mine, epoch_end) : mine;
  }
  // The lowest rank with a stop signal, and that signal, given this rank's (0: none);
  // {-1, 0} when none has one. A collective: with several ranks only (distributed()).
  std::pair<std::int64_t, int> first_signal(int mine) const;
  void barrier() const {
    if (collectives_) collectives_->barrier();
  }
  // A fit with several ranks needs a hook's collectives, or the ranks would train apart:
  // throws ConfigError saying so.
  void check_fit() const;
  // Outside a fit, several ranks and no hook's collectives: wick's own Gloo group.
  void join_if_needed();

 private:
  // A sharding strategy seen through the SDK 2.6 interface, for hooks that ask for it.
  struct StrategyView : ShardedState {
    DataParallelStrategy* s = nullptr;
    void gather_for_save() override { s->gather_whole(Whole::training_state); }
    void release_after_save() override { s->release_whole(Whole::training_state); }
  };

  JobRanks job_;
  Collectives* collectives_ = nullptr;
  ShardedState* sharded_ = nullptr;
  DataParallelStrategy* strategy_ = nullptr;
  mutable StrategyView strategy_view_;
  mutable int gathered_ = 0;          // live WholeState guards
  std::unique_ptr<Collectives> own_;  // join_if_needed's (dist/ranks.hpp)
};

}  // namespace wick
