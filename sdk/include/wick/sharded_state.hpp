// State sharded over data-parallel processes (since SDK 2.6): a data-parallel plugin that
// keeps each optimizer's state for its own share of the parameters only (ZeRO; ddp's
// shard_optimizer) installs this on the Context in before_fit (Context::set_sharded_state), and the
// framework and other plugins take it into account:
// - each process's optimizers hold only its share of the parameters in their groups, so a
//   quantity over all gradients (a norm, a non-finite check) is this process's part combined
//   over processes with Collectives::all_reduce_sum (grad_clip and mixed_precision do);
// - checkpoints: around each save, on every process, the framework calls gather_for_save()
//   before rank 0 writes and release_after_save() after, so the checkpoint holds the whole
//   state, as an unsharded run writes it (it resumes sharded or not, on any world size).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// Which rank owns each of a list of tensors (given by their element counts, in the list's
// order) when `world` ranks share them: contiguous runs of about equal element counts, rank 0
// first. A tensor is owned whole, by the rank whose equal slice of all the elements holds its
// middle one, so one tensor larger than a slice makes the shares uneven (ddp's
// shard_optimizer used it before it split tensors; kept for sharding by whole tensors).
inline std::vector<int> balanced_owners(const std::vector<std::int64_t>& numels, int world) {
  std::int64_t total = 0;
  for (auto n : numels) total += n;
  std::vector<int> owners;
  std::int64_t before = 0;
  for (auto n : numels) {
    const std::int64_t mid = before + n / 2;
    owners.push_back(
        static_cast<int>(std::min<std::int64_t>(world - 1, total > 0 ? mid * world / total : 0)));
    before += n;
  }
  return owners;
}

class ShardedState {
 public:
  virtual ~ShardedState() = default;
  // Collective: rank 0's optimizers then hold every parameter and every process's state.
  virtual void gather_for_save() = 0;
  // Collective: back to each process's share.
  virtual void release_after_save() = 0;
};

}  // namespace wick

WICK_PUBLIC_END
