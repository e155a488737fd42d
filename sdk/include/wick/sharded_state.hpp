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

namespace wick {

class ShardedState {
 public:
  virtual ~ShardedState() = default;
  // Collective: rank 0's optimizers then hold every parameter and every process's state.
  virtual void gather_for_save() = 0;
  // Collective: back to each process's share.
  virtual void release_after_save() = 0;
};

}  // namespace wick
