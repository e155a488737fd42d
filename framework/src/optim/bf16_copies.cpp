// optim/bf16_copies.hpp: the copies, kept per parameter by its TensorImpl.
#include "optim/bf16_copies.hpp"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace wick::bf16_copies {
namespace {

struct Copy {
  explicit Copy(c10::weak_intrusive_ptr<c10::TensorImpl> p) : param(std::move(p)) {}
  // The parameter, not kept alive by its copy: a dead one's entry goes at the next new entry
  // or refresh.
  c10::weak_intrusive_ptr<c10::TensorImpl> param;
  at::Tensor copy;    // defined once a step of fused Adam was asked for it
  bool held = false;  // copy holds the parameter as it was at `version` and `data`
  std::uint32_t version = 0;
  const void* data = nullptr;

  // Whether the copy has p's sizes and device: it can hold p.
  bool fits(const at::Tensor& p) const {
    return copy.defined() && copy.sizes() == p.sizes() && copy.device() == p.device();
  }
  // Whether the copy holds p now (sizes too: a reshape in place keeps storage and version
  // counter).
  bool holds(const at::Tensor& p) const {
    return held && version == p._version() && data == p.data_ptr() && fits(p);
  }
  // The copy holds p as it is now.
  void record(const at::Tensor& p) {
    held = true;
    version = p._version();
    data = p.data_ptr();
  }
};

struct Registry {
  std::mutex mutex;
  std::unordered_map<const c10::TensorImpl*, Copy> copies;
  std::atomic<std::int64_t> served{0};
};

Registry& registry() {
  static Registry r;
  return r;
}

// p's entry, where it has one (not one of a dead tensor at the same address). Under the mutex.
Copy* find(Registry& r, const at::Tensor& p) {
  const auto it = r.copies.find(p.unsafeGetTensorImpl());
  if (it == r.copies.end() || it->second.param.lock().get() != p.unsafeGetTensorImpl())
    return nullptr;
  return &it->second;
}

bool takes_copy(const at::Tensor& p) {
  return p.defined() && p.scalar_type() == at::kFloat && p.is_leaf() && p.is_contiguous();
}

}  // namespace

at::Tensor of(const at::Tensor& p) {
  if (p.scalar_type() == at::kBFloat16) return p;
  if (!takes_copy(p)) return p.to(at::kBFloat16);
  auto& r = registry();
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    if (Copy* c = find(r, p)) {
      if (c->holds(p)) {
        r.served.fetch_add(1, std::memory_order_relaxed);
        return c->copy;
      }
    } else {
      for (auto it = r.copies.begin(); it != r.copies.end();)
        it = it->second.param.expired() ? r.copies.erase(it) : std::next(it);
      r.copies.insert_or_assign(
          p.unsafeGetTensorImpl(),
          Copy(c10::weak_intrusive_ptr<c10::TensorImpl>(p.getIntrusivePtr())));
    }
  }
  return p.to(at::kBFloat16);
}

at::Tensor to_write(const at::Tensor& p) {
  if (!takes_copy(p)) return {};
  auto& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  Copy* c = find(r, p);
  if (!c) return {};
  c->held = false;
  if (!c->fits(p)) c->copy = at::empty(p.sizes(), p.options().dtype(at::kBFloat16));
  return c->copy;
}

void written(const at::Tensor& p) {
  auto& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  Copy* c = find(r, p);
  if (!c || !c->copy.defined()) return;
  c->record(p);
  c->copy.unsafeGetTensorImpl()->bump_version();
}

void refresh() {
  auto& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.copies.begin(); it != r.copies.end();) {
    Copy& c = it->second;
    const at::Tensor p(
        c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(c.param.lock()));
    if (!p.defined()) {
      it = r.copies.erase(it);
      continue;
    }
    // The cast a product would make, rounded as the kernel rounds (to nearest even); copy_
    // moves the copy's version counter on, as written() does.
    if (c.fits(p) && !c.holds(p)) {
      c.copy.copy_(p.detach());
      c.record(p);
    }
    ++it;
  }
}

void release(const std::vector<at::Tensor>& params) {
  auto& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& p : params)
    if (find(r, p)) r.copies.erase(p.unsafeGetTensorImpl());
}

std::int64_t served() {
  return registry().served.load(std::memory_order_relaxed);
}

}  // namespace wick::bf16_copies
