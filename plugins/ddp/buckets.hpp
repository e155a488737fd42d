// Flat buffers of tensors (ddp's gradient and parameter buckets).
#pragma once

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cstdint>
#include <vector>

namespace wick_ddp {

// Tensors of one dtype and device, laid out in one flat buffer.
struct Bucket {
  std::vector<at::Tensor> tensors;
  std::vector<std::int64_t> offsets;
  std::vector<std::size_t> ids;  // the tensors' indices in the list the buckets were made from
  std::int64_t numel = 0;        // of the tensors (the buffer may hold a trailer beyond it)
  int owner = -1;                // sharded gradients: the rank it is reduced to; -1: all
  at::Tensor flat;
  std::vector<at::Tensor> views;  // each tensor's place in flat, in its shape
  std::vector<at::Tensor> io;     // {flat}, as the collectives take it
  // Per optimizer step (gradient buckets only):
  std::size_t pending = 0;  // tensors whose gradient is not packed yet
  c10::intrusive_ptr<c10d::Work> work, recv;
  bool exchange = false;         // all-reduced by a two-rank exchange rather than Gloo's ring
  std::vector<at::Tensor> peer;  // {the other rank's buffer}, in a two-rank exchange

  // The flat buffer (with `extra` elements beyond the tensors) and the views into it, made once.
  void allocate(std::int64_t extra) {
    flat = torch::empty({numel + extra}, tensors.front().options().requires_grad(false));
    io = {flat};
    views.clear();
    for (std::size_t i = 0; i < tensors.size(); ++i)
      views.push_back(flat.narrow(0, offsets[i], tensors[i].numel()).view(tensors[i].sizes()));
  }
};

// Cuts `ts` (in that order) into buckets the way PyTorch's DDP does: a bucket closes once it
// holds at least its cap (first_cap for the first one, cap after), or when dtype or device
// change, or (given owners, one per tensor) the owner.
inline std::vector<Bucket> make_buckets(const std::vector<at::Tensor>& ts, std::int64_t first_cap,
                                        std::int64_t cap,
                                        const std::vector<int>* owners = nullptr) {
  std::vector<Bucket> out;
  bool open = false;
  for (std::size_t k = 0; k < ts.size(); ++k) {
    const auto& t = ts[k];
    const int owner = owners ? (*owners)[k] : -1;
    if (open && (out.back().tensors.front().scalar_type() != t.scalar_type() ||
                 out.back().tensors.front().device() != t.device() || out.back().owner != owner))
      open = false;
    if (!open) {
      out.emplace_back();
      out.back().owner = owner;
    }
    open = true;
    auto& b = out.back();
    b.tensors.push_back(t);
    b.offsets.push_back(b.numel);
    b.ids.push_back(k);
    b.numel += t.numel();
    const std::int64_t bytes = b.numel * static_cast<std::int64_t>(t.element_size());
    if (bytes >= (out.size() == 1 ? first_cap : cap)) open = false;
  }
  return out;
}

}  // namespace wick_ddp
