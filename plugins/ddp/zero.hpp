// Sharded optimizer state for ddp (ZeRO stage 1; stage 2 adds ddp's gradient reduction to
// each parameter's owner) and for zero3 (whole parameters, Sharing::whole_tensors). The trainable
// parameters, laid end to end (last layer first, as ddp's buckets are), are cut into `world` equal
// runs of elements, rank r owning the r-th, as DeepSpeed splits its flat buffer. A parameter inside
// one run belongs to that rank whole; one that a cut crosses is split: each of its owners steps a
// piece of it (a tensor of its own in the optimizer's groups, with its own moments). So each rank's
// optimizers keep state for an equal share, and only that share is stepped. After each step every
// share is broadcast from its owner, so all ranks hold the same weights again. Checkpoints: around
// a save the owners send their state to rank 0, which writes it whole, as an unsharded run would (a
// split parameter's pieces joined; wick/sharded_state.hpp); a checkpoint resumes sharded or not, on
// any world size. The optimizers are sharded at their first step, after a checkpoint restore.
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <wick/sharded_state.hpp>
#include <wick/torch_compat.hpp>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace wick_ddp {

// How the ranks talk: ddp's process group, and its wait (which turns failures into errors
// naming the rank).
struct Comm {
  c10::intrusive_ptr<wick::compat::CommBackend> pg;
  torch::Device device;
  int rank = 0, world = 1;
  std::function<void(const c10::intrusive_ptr<c10d::Work>&, const char*)> wait;
};

// Sums a small CPU tensor over the ranks, in place (through the device when the backend needs
// it there: NCCL).
void all_reduce_host(const Comm& comm, at::Tensor& t);

// A run of a parameter's elements (in row-major order) that one rank owns.
struct Segment {
  int owner = 0;
  std::int64_t start = 0, length = 0;
};

// Each parameter's segments when `world` ranks share the parameters (given by their element
// counts, in order) equally: rank r owns elements [r * total / world, (r + 1) * total / world)
// of them laid end to end. A parameter that no cut crosses has one segment.
std::vector<std::vector<Segment>> even_segments(const std::vector<std::int64_t>& numels, int world);

// How the parameters are shared: ddp's even runs of elements, or each parameter whole, owned
// as wick::balanced_owners deals them (zero3, which frees the others' parameters).
enum class Sharing { even_runs, whole_tensors };

class OptimizerShards : public wick::ShardedState {
 public:
  // `params` in the order of the split (ddp's: last layer first).
  OptimizerShards(Comm comm, const std::vector<at::Tensor>& params,
                  Sharing sharing = Sharing::even_runs);
  // In the optimizer_step stage before `opt` steps; its first time, keeps this rank's share of
  // its groups (pieces of the split parameters) and drops the state of the others' share.
  void before_step(torch::optim::Optimizer& opt);
  // After `opt`'s step (taken or declined, on every rank alike): each share from its owner.
  void after_step(torch::optim::Optimizer& opt);
  // Each share of `opt`'s parameters from its owner into every rank's (after_step's
  // broadcast; zero3 gathers the parameters it freed with it). Without keep_buffers the
  // buffers, one per share, are freed after it and made again by the next call.
  void broadcast_shares(torch::optim::Optimizer& opt, bool keep_buffers);

  // Which rank owns parameter `p` whole (ddp reduces its gradient there with shard_gradients),
  // or -1 when it is split (its gradient is all-reduced).
  int whole_owner(const at::Tensor& p) const;

  void gather_for_save() override;
  void release_after_save() override;

  // Bytes of optimizer state this rank holds (Adam, AdamW, SGD), over every optimizer.
  static std::int64_t state_bytes(const torch::optim::Optimizer& opt);

 private:
  // A parameter split between ranks, and this rank's piece of it (undefined when none).
  struct Split {
    at::Tensor param;
    std::vector<Segment> segments;
    at::Tensor piece;
    Segment mine;
  };
  // One broadcast per owner and dtype: the segments it owns, packed in one buffer.
  struct Share {
    int owner = 0;
    std::vector<at::Tensor> params;
    std::vector<Segment> segments;
    std::vector<std::int64_t> offsets;
    at::Tensor flat;
    std::vector<at::Tensor> io;
  };
  struct Entry {
    torch::optim::Optimizer* opt = nullptr;
    std::vector<std::vector<at::Tensor>> all, mine;  // each group's parameters (mine: pieces)
    std::vector<Split> splits;
    std::vector<Share> shares;
  };
  Entry& entry(torch::optim::Optimizer& opt);
  std::vector<Segment> segments(const at::Tensor& p) const;
  void set_groups(Entry& e, bool all);
  void drop_others_state(Entry& e);
  void join_split_state(Entry& e);
  void send_bytes(const std::string& bytes, int to);
  std::string recv_bytes(int from);
  void send_tensor(const at::Tensor& t, int to, int tag);
  at::Tensor recv_tensor(at::Tensor like, int from, int tag);

  Comm comm_;
  std::unordered_map<const c10::TensorImpl*, std::vector<Segment>> segments_;
  std::vector<Entry> entries_;
  bool gathered_ = false;
};

}  // namespace wick_ddp
