#include "zero.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>

namespace wick_ddp {

OptimizerShards::OptimizerShards(Comm comm, const std::vector<at::Tensor>& params,
                                 const std::vector<int>& owners)
    : comm_(std::move(comm)) {
  for (std::size_t i = 0; i < params.size(); ++i)
    owners_[params[i].unsafeGetTensorImpl()] = owners[i];
}

int OptimizerShards::owner(const at::Tensor& p) const {
  const auto it = owners_.find(p.unsafeGetTensorImpl());
  return it == owners_.end() ? 0 : it->second;  // not trainable when ddp set up: rank 0's
}

OptimizerShards::Entry& OptimizerShards::entry(torch::optim::Optimizer& opt) {
  for (auto& e : entries_)
    if (e.opt == &opt) return e;
  Entry e;
  e.opt = &opt;
  std::vector<std::vector<at::Tensor>> per_owner(static_cast<std::size_t>(comm_.world));
  for (const auto& g : opt.param_groups()) {
    e.all.push_back(g.params());
    e.mine.emplace_back();
    for (const auto& p : g.params()) {
      const int o = owner(p);
      per_owner[static_cast<std::size_t>(o)].push_back(p);
      if (o == comm_.rank) e.mine.back().push_back(p);
    }
  }
  // One broadcast per owner (and dtype) after each step: no cap on a buffer's size.
  constexpr auto kNoCap = std::numeric_limits<std::int64_t>::max();
  for (int r = 0; r < comm_.world; ++r) {
    std::vector<int> owner_of(per_owner[static_cast<std::size_t>(r)].size(), r);
    for (auto& b : make_buckets(per_owner[static_cast<std::size_t>(r)], kNoCap, kNoCap, &owner_of))
      e.by_owner.push_back(std::move(b));
  }
  for (auto& b : e.by_owner) b.allocate(0);
  entries_.push_back(std::move(e));
  auto& made = entries_.back();
  drop_others_state(made);
  set_groups(made, false);
  return made;
}

void OptimizerShards::set_groups(Entry& e, bool all) {
  auto& groups = e.opt->param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].params() = all ? e.all[g] : e.mine[g];
}

void OptimizerShards::drop_others_state(Entry& e) {
  auto& state = e.opt->state();
  for (const auto& group : e.all)
    for (const auto& p : group)
      if (owner(p) != comm_.rank) state.erase(wick::compat::optim_state_key(p));
}

void OptimizerShards::before_step(torch::optim::Optimizer& opt) {
  entry(opt);
}

void OptimizerShards::after_step(torch::optim::Optimizer& opt) {
  auto& e = entry(opt);
  torch::NoGradGuard no_grad;
  for (auto& b : e.by_owner) {
    const bool mine = b.owner == comm_.rank;
    if (mine)
      for (std::size_t i = 0; i < b.tensors.size(); ++i) b.views[i].copy_(b.tensors[i].detach());
    c10d::BroadcastOptions o;
    o.rootRank = b.owner;
    comm_.wait(comm_.pg->broadcast(b.io, o), "parameter broadcast from its owner");
    if (!mine)
      for (std::size_t i = 0; i < b.tensors.size(); ++i) {
        b.tensors[i].copy_(b.views[i]);
        // Its owner stepped it; zero_grad reaches only this rank's share (its optimizer's
        // groups), so the gradient would otherwise add into the next step's.
        b.tensors[i].mutable_grad() = at::Tensor();
      }
  }
}

void OptimizerShards::send_bytes(const std::string& bytes, int to) {
  auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
  auto data = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  std::vector<at::Tensor> s{size.to(comm_.device)}, d{data.to(comm_.device)};
  comm_.wait(comm_.pg->send(s, to, 0), "optimizer state size to rank 0");
  if (!bytes.empty()) comm_.wait(comm_.pg->send(d, to, 1), "optimizer state to rank 0");
}

std::string OptimizerShards::recv_bytes(int from) {
  std::vector<at::Tensor> s{torch::empty({1}, torch::kLong).to(comm_.device)};
  comm_.wait(comm_.pg->recv(s, from, 0),
             "optimizer state size from its owner (with shard_optimizer every rank must call "
             "Context::save_checkpoint at the same point)");
  const auto n = s[0].cpu().item<std::int64_t>();
  std::string bytes(static_cast<std::size_t>(n), '\0');
  if (n == 0) return bytes;
  std::vector<at::Tensor> d{torch::empty({n}, torch::kUInt8).to(comm_.device)};
  comm_.wait(comm_.pg->recv(d, from, 1), "optimizer state from its owner");
  const auto host = d[0].cpu();
  std::memcpy(bytes.data(), host.data_ptr(), bytes.size());
  return bytes;
}

void OptimizerShards::gather_for_save() {
  if (entries_.empty() || gathered_) return;
  gathered_ = true;
  for (auto& e : entries_) set_groups(e, true);
  // Saved with every parameter in its groups, a rank's archive holds state for its own
  // share; loading it keeps the state rank 0 has for the others (LibTorch's load replaces
  // only the entries the archive holds).
  for (int r = 1; r < comm_.world; ++r)
    for (auto& e : entries_) {
      if (comm_.rank == r) {
        torch::serialize::OutputArchive a;
        e.opt->save(a);
        std::ostringstream out;
        a.save_to(out);
        send_bytes(out.str(), 0);
      } else if (comm_.rank == 0) {
        std::istringstream in(recv_bytes(r));
        torch::serialize::InputArchive a;
        a.load_from(in);
        e.opt->load(a);
      }
    }
}

void OptimizerShards::release_after_save() {
  if (!gathered_) return;
  gathered_ = false;
  for (auto& e : entries_) {
    drop_others_state(e);
    set_groups(e, false);
  }
}

std::int64_t OptimizerShards::state_bytes(const torch::optim::Optimizer& opt) {
  std::int64_t n = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) n += static_cast<std::int64_t>(t.nbytes());
  };
  for (const auto& kv : opt.state()) {
    const auto* s = kv.second.get();
    if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(s)) {
      add(a->exp_avg());
      add(a->exp_avg_sq());
      add(a->max_exp_avg_sq());
    } else if (const auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(s)) {
      add(w->exp_avg());
      add(w->exp_avg_sq());
      add(w->max_exp_avg_sq());
    } else if (const auto* m = dynamic_cast<const torch::optim::SGDParamState*>(s)) {
      add(m->momentum_buffer());
    }
  }
  return n;
}

}  // namespace wick_ddp
