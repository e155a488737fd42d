#include "zero.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

namespace wick_ddp {

namespace {

// A parameter's elements in row-major order (a view when it is contiguous).
at::Tensor flat_of(const at::Tensor& p) {
  return p.detach().reshape({-1});
}

// Writes `src` over elements [start, start + src.numel()) of `p` (row-major).
void write_slice(const at::Tensor& p, std::int64_t start, const at::Tensor& src) {
  auto d = p.detach();
  if (d.is_contiguous()) {
    d.view({-1}).narrow(0, start, src.numel()).copy_(src);
    return;
  }
  auto tmp = d.contiguous();  // channels_last weights: through a row-major copy
  tmp.view({-1}).narrow(0, start, src.numel()).copy_(src);
  d.copy_(tmp);
}

// The optimizer states a split parameter's pieces can have: each tensor of them has the
// parameter's shape, element for element, so a piece's state is a slice of the whole one.
enum StateKind : std::int64_t { kNone = 0, kAdam = 1, kAdamW = 2, kSgd = 3 };

// The state's tensors (undefined where absent: max_exp_avg_sq without amsgrad) and its step.
struct StateParts {
  StateKind kind = kNone;
  std::int64_t step = 0;
  std::vector<at::Tensor> tensors;
};

// strict: another optimizer's state throws (it cannot be split); else it counts as none.
StateParts parts_of(const torch::optim::OptimizerParamState* s, bool strict) {
  StateParts out;
  if (!s) return out;
  if (const auto* a = dynamic_cast<const torch::optim::AdamParamState*>(s)) {
    out = {kAdam, a->step(), {a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()}};
  } else if (const auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(s)) {
    out = {kAdamW, w->step(), {w->exp_avg(), w->exp_avg_sq(), w->max_exp_avg_sq()}};
  } else if (const auto* m = dynamic_cast<const torch::optim::SGDParamState*>(s)) {
    out = {kSgd, 0, {m->momentum_buffer()}};
  } else if (strict) {
    throw std::runtime_error(
        "ddp: shard_optimizer splits parameters between ranks, and cannot split this "
        "optimizer's state (Adam, AdamW and SGD only); set shard_optimizer = false");
  }
  return out;
}

std::unique_ptr<torch::optim::OptimizerParamState> make_state(const StateParts& p) {
  const auto& t = p.tensors;
  switch (p.kind) {
    case kAdam: {
      auto s = std::make_unique<torch::optim::AdamParamState>();
      s->step(p.step);
      s->exp_avg(t[0]);
      s->exp_avg_sq(t[1]);
      if (t[2].defined()) s->max_exp_avg_sq(t[2]);
      return s;
    }
    case kAdamW: {
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(p.step);
      s->exp_avg(t[0]);
      s->exp_avg_sq(t[1]);
      if (t[2].defined()) s->max_exp_avg_sq(t[2]);
      return s;
    }
    case kSgd: {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(t[0]);
      return s;
    }
    case kNone:
      break;
  }
  return nullptr;
}

torch::optim::OptimizerParamState* state_of(torch::optim::Optimizer& opt, const at::Tensor& p) {
  auto& state = opt.state();
  const auto it = state.find(wick::compat::optim_state_key(p));
  return it == state.end() ? nullptr : it->second.get();
}

}  // namespace

void all_reduce_host(const Comm& comm, at::Tensor& t) {
  if (comm.device.is_cpu()) {
    std::vector<at::Tensor> v{t};
    comm.wait(comm.pg->allreduce(v), "all-reduce");
    return;
  }
  std::vector<at::Tensor> v{t.to(comm.device)};
  comm.wait(comm.pg->allreduce(v), "all-reduce");
  t.copy_(v[0].cpu());
}

std::vector<std::vector<Segment>> even_segments(const std::vector<std::int64_t>& numels,
                                                int world) {
  std::int64_t total = 0;
  for (auto n : numels) total += n;
  const auto bound = [&](int r) { return total * r / world; };  // rank r's first element
  std::vector<std::vector<Segment>> out;
  std::int64_t at = 0;
  int r = 0;
  for (auto n : numels) {
    out.emplace_back();
    for (std::int64_t done = 0; done < n;) {
      while (r + 1 < world && bound(r + 1) <= at + done) ++r;
      const std::int64_t end = r + 1 < world ? std::min(at + n, bound(r + 1)) : at + n;
      out.back().push_back({r, done, end - at - done});
      done = end - at;
    }
    if (n == 0) out.back().push_back({r, 0, 0});
    at += n;
  }
  return out;
}

OptimizerShards::OptimizerShards(Comm comm, const std::vector<at::Tensor>& params, Sharing sharing)
    : comm_(std::move(comm)) {
  std::vector<std::int64_t> numels;
  for (const auto& p : params) numels.push_back(p.numel());
  std::vector<std::vector<Segment>> segs;
  if (sharing == Sharing::even_runs) {
    segs = even_segments(numels, comm_.world);
  } else {
    const auto owners = wick::balanced_owners(numels, comm_.world);
    for (std::size_t i = 0; i < params.size(); ++i) segs.push_back({{owners[i], 0, numels[i]}});
  }
  for (std::size_t i = 0; i < params.size(); ++i)
    segments_[params[i].unsafeGetTensorImpl()] = segs[i];
}

std::vector<Segment> OptimizerShards::segments(const at::Tensor& p) const {
  const auto it = segments_.find(p.unsafeGetTensorImpl());
  if (it != segments_.end()) return it->second;
  return {{0, 0, p.numel()}};  // not trainable when ddp set up: rank 0's, whole
}

// Per parameter after every step: a lookup, no copy.
int OptimizerShards::whole_owner(const at::Tensor& p) const {
  const auto it = segments_.find(p.unsafeGetTensorImpl());
  if (it == segments_.end()) return 0;
  return it->second.size() == 1 ? it->second[0].owner : -1;
}

OptimizerShards::Entry& OptimizerShards::entry(torch::optim::Optimizer& opt) {
  for (auto& e : entries_)
    if (e.opt == &opt) return e;
  Entry e;
  e.opt = &opt;
  torch::NoGradGuard no_grad;
  for (const auto& g : opt.param_groups()) {
    e.all.push_back(g.params());
    e.mine.emplace_back();
    for (const auto& p : g.params()) {
      const auto segs = segments(p);
      if (segs.size() == 1) {
        if (segs[0].owner == comm_.rank) e.mine.back().push_back(p);
        continue;
      }
      Split s{p, segs, {}, {}};
      for (const auto& seg : segs)
        if (seg.owner == comm_.rank) {
          s.mine = seg;
          // A tensor of its own: the optimizer keys its state by tensor.
          s.piece = flat_of(p).narrow(0, seg.start, seg.length).clone();
          s.piece.set_requires_grad(true);
          e.mine.back().push_back(s.piece);
          // State restored for the whole parameter: this piece's slice of it.
          auto parts = parts_of(state_of(opt, p), /*strict=*/true);
          if (parts.kind != kNone) {
            for (auto& t : parts.tensors)
              if (t.defined()) t = flat_of(t).narrow(0, seg.start, seg.length).clone();
            opt.state()[wick::compat::optim_state_key(s.piece)] = make_state(parts);
          }
        }
      e.splits.push_back(std::move(s));
    }
  }
  // The shares each rank broadcasts after a step: its segments, per dtype, in one buffer.
  for (int r = 0; r < comm_.world; ++r)
    for (const auto& group : e.all)
      for (const auto& p : group)
        for (const auto& seg : segments(p)) {
          if (seg.owner != r || seg.length == 0) continue;
          if (e.shares.empty() || e.shares.back().owner != r ||
              e.shares.back().params.front().scalar_type() != p.scalar_type())
            e.shares.push_back(Share{r, {}, {}, {}, {}, {}});
          auto& sh = e.shares.back();
          sh.offsets.push_back(sh.offsets.empty() ? 0
                                                  : sh.offsets.back() + sh.segments.back().length);
          sh.params.push_back(p);
          sh.segments.push_back(seg);
        }
  for (auto& sh : e.shares) {
    const std::int64_t n = sh.offsets.back() + sh.segments.back().length;
    sh.flat = torch::empty({n}, sh.params.front().options().requires_grad(false));
    sh.io = {sh.flat};
  }
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
      if (whole_owner(p) != comm_.rank) state.erase(wick::compat::optim_state_key(p));
}

void OptimizerShards::before_step(torch::optim::Optimizer& opt) {
  auto& e = entry(opt);
  torch::NoGradGuard no_grad;
  for (auto& s : e.splits) {
    if (!s.piece.defined()) continue;
    s.piece.detach().copy_(flat_of(s.param).narrow(0, s.mine.start, s.mine.length));
    const auto& g = s.param.grad();
    s.piece.mutable_grad() = g.defined()
                                 ? g.detach().reshape({-1}).narrow(0, s.mine.start, s.mine.length)
                                 : at::Tensor();
  }
}

void OptimizerShards::after_step(torch::optim::Optimizer& opt) {
  auto& e = entry(opt);
  torch::NoGradGuard no_grad;
  for (auto& s : e.splits)
    if (s.piece.defined()) {
      write_slice(s.param, s.mine.start, s.piece.detach());
      s.piece.mutable_grad() = at::Tensor();
    }
  broadcast_shares(opt, /*keep_buffers=*/true);
  // Its owners stepped it; zero_grad reaches only this rank's share (its optimizer's groups),
  // so a gradient left here would add into the next step's.
  for (auto& group : e.all)
    for (auto& p : group)
      if (whole_owner(p) != comm_.rank) p.mutable_grad() = at::Tensor();
}

void OptimizerShards::broadcast_shares(torch::optim::Optimizer& opt, bool keep_buffers) {
  auto& e = entry(opt);
  torch::NoGradGuard no_grad;
  for (auto& sh : e.shares) {
    const bool mine = sh.owner == comm_.rank;
    // Freed after the last broadcast: allocated again (the tensor that sh.io holds).
    if (sh.flat.numel() == 0) sh.flat.resize_({sh.offsets.back() + sh.segments.back().length});
    if (mine)
      for (std::size_t i = 0; i < sh.params.size(); ++i)
        sh.flat.narrow(0, sh.offsets[i], sh.segments[i].length)
            .copy_(flat_of(sh.params[i]).narrow(0, sh.segments[i].start, sh.segments[i].length));
    c10d::BroadcastOptions o;
    o.rootRank = sh.owner;
    comm_.wait(comm_.pg->broadcast(sh.io, o), "parameter broadcast from its owner");
    if (!mine)
      for (std::size_t i = 0; i < sh.params.size(); ++i)
        write_slice(sh.params[i], sh.segments[i].start,
                    sh.flat.narrow(0, sh.offsets[i], sh.segments[i].length));
    // Its storage freed here, on this thread, whatever Gloo's work still holds of the tensor.
    if (!keep_buffers) sh.flat.set_();
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

void OptimizerShards::send_tensor(const at::Tensor& t, int to, int tag) {
  std::vector<at::Tensor> v{t.contiguous().to(comm_.device)};
  comm_.wait(comm_.pg->send(v, to, tag), "a split parameter's optimizer state to rank 0");
}

at::Tensor OptimizerShards::recv_tensor(at::Tensor like, int from, int tag) {
  std::vector<at::Tensor> v{like.to(comm_.device)};
  comm_.wait(comm_.pg->recv(v, from, tag), "a split parameter's optimizer state from its owner");
  return v[0].to(like.device());
}

// Rank 0 gets each split parameter's whole state: its pieces' states, joined in order. Each
// owner sends {kind, step, rows} and its state's tensors stacked as rows.
void OptimizerShards::join_split_state(Entry& e) {
  torch::NoGradGuard no_grad;
  for (auto& s : e.splits) {
    StateParts whole{kNone, 0, {}};
    std::vector<at::Tensor> joined;
    bool missing = false;  // a piece never stepped: the parameter has no state yet
    for (const auto& seg : s.segments) {
      if (comm_.rank != 0 && comm_.rank != seg.owner) continue;
      auto head = torch::zeros({3}, torch::kLong);
      at::Tensor body;
      if (comm_.rank == seg.owner) {
        const auto mine = parts_of(state_of(*e.opt, s.piece), /*strict=*/true);
        std::vector<at::Tensor> rows;
        for (const auto& t : mine.tensors)
          if (t.defined()) rows.push_back(flat_of(t));
        head[0] = static_cast<std::int64_t>(mine.kind);
        head[1] = mine.step;
        head[2] = static_cast<std::int64_t>(rows.size());
        if (!rows.empty()) body = torch::stack(rows);
        if (seg.owner != 0) {
          send_tensor(head, 0, 2);
          if (body.defined()) send_tensor(body, 0, 3);
          continue;
        }
      } else {  // rank 0, another rank's piece
        head = recv_tensor(head, seg.owner, 2);
        if (const auto rows = head[2].item<std::int64_t>(); rows > 0)
          body = recv_tensor(torch::empty({rows, seg.length}, s.param.options()), seg.owner, 3);
      }
      const auto kind = static_cast<StateKind>(head[0].item<std::int64_t>());
      if (kind == kNone || !body.defined()) {
        missing = true;
        continue;
      }
      whole.kind = kind;
      whole.step = head[1].item<std::int64_t>();
      joined.push_back(body);
    }
    if (comm_.rank != 0 || missing || joined.empty()) continue;
    const auto rows = torch::cat(joined, 1);  // (tensors, numel)
    whole.tensors.assign(3, at::Tensor());
    for (std::int64_t i = 0; i < rows.size(0); ++i)
      whole.tensors[static_cast<std::size_t>(i)] = rows[i].reshape(s.param.sizes()).clone();
    e.opt->state()[wick::compat::optim_state_key(s.param)] = make_state(whole);
  }
}

void OptimizerShards::gather_for_save() {
  if (entries_.empty() || gathered_) return;
  gathered_ = true;
  for (auto& e : entries_) join_split_state(e);
  for (auto& e : entries_) set_groups(e, true);
  // Saved with every parameter in its groups, a rank's archive holds state for its own
  // share; loading it keeps the state rank 0 has for the others (LibTorch's load replaces
  // only the entries the archive holds). A split parameter has no state on the others.
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
  for (const auto& kv : opt.state())
    for (const auto& t : parts_of(kv.second.get(), /*strict=*/false).tensors)
      if (t.defined()) n += static_cast<std::int64_t>(t.nbytes());
  return n;
}

}  // namespace wick_ddp
