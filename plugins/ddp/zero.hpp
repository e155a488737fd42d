// Sharded optimizer state for ddp (ZeRO stage 1; stage 2 adds ddp's gradient reduction to
// each parameter's owner). Every trainable parameter has one owner rank; each rank's
// optimizers keep only the parameters it owns in their groups, so Adam's moments (or SGD's
// momentum) exist for that share only, and only that share is stepped. After each step every
// parameter is broadcast from its owner, so all ranks hold the same weights again.
// Checkpoints: around a save the owners send their state to rank 0, which writes it whole, as
// an unsharded run would (wick/sharded_state.hpp); a checkpoint resumes sharded or not, on any
// world size. The optimizers are sharded at their first step, after a checkpoint restore.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <wick/sharded_state.hpp>
#include <wick/torch_compat.hpp>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "buckets.hpp"

namespace wick_ddp {

// How the ranks talk: ddp's process group, and its wait (which turns failures into errors
// naming the rank).
struct Comm {
  c10::intrusive_ptr<wick::compat::CommBackend> pg;
  torch::Device device;
  int rank = 0, world = 1;
  std::function<void(const c10::intrusive_ptr<c10d::Work>&, const char*)> wait;
};

class OptimizerShards : public wick::ShardedState {
 public:
  OptimizerShards(Comm comm, const std::vector<at::Tensor>& params, const std::vector<int>& owners);
  // In the optimizer_step stage before `opt` steps; its first time, keeps this rank's share of
  // its groups and drops the state of the others' parameters.
  void before_step(torch::optim::Optimizer& opt);
  // After `opt`'s step (taken or declined, on every rank alike): each of its parameters from
  // its owner.
  void after_step(torch::optim::Optimizer& opt);

  void gather_for_save() override;
  void release_after_save() override;

  // Bytes of optimizer state this rank holds (Adam, AdamW, SGD), over every optimizer.
  static std::int64_t state_bytes(const torch::optim::Optimizer& opt);

 private:
  struct Entry {
    torch::optim::Optimizer* opt = nullptr;
    std::vector<std::vector<at::Tensor>> all, mine;  // each group's parameters
    std::vector<Bucket> by_owner;                    // one flat buffer per owner (and dtype)
  };
  Entry& entry(torch::optim::Optimizer& opt);
  int owner(const at::Tensor& p) const;
  void set_groups(Entry& e, bool all);
  void drop_others_state(Entry& e);
  void send_bytes(const std::string& bytes, int to);
  std::string recv_bytes(int from);

  Comm comm_;
  std::unordered_map<const c10::TensorImpl*, int> owners_;
  std::vector<Entry> entries_;
  bool gathered_ = false;
};

}  // namespace wick_ddp
