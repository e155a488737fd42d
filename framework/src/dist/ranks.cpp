#include "dist/ranks.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <cstdint>

#include "wick/rendezvous.hpp"

namespace wick {

namespace {

class GlooRanks : public Collectives {
 public:
  explicit GlooRanks(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg) : pg_(std::move(pg)) {}

  void all_reduce_sum(at::Tensor& t) override {
    std::vector<at::Tensor> io = {t};
    pg_->allreduce(io)->wait();
  }
  void barrier() override { pg_->barrier()->wait(); }
  bool agree_stop(bool local_stop, bool) override {
    auto flag = at::full({1}, local_stop ? 1.0 : 0.0, at::kDouble);
    all_reduce_sum(flag);
    return flag.item<double>() > 0;
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

}  // namespace

std::unique_ptr<Collectives> join_ranks(std::int64_t rank, std::int64_t world) {
  // As long as the ddp hook waits by default: ranks that load a model and data start unevenly.
  const std::chrono::milliseconds timeout = std::chrono::minutes(5);
  const int r = static_cast<int>(rank), w = static_cast<int>(world);
  auto store = rendezvous(r, w, timeout, "wick-ranks", "wick");
  return std::make_unique<GlooRanks>(gloo_group(store, r, w, timeout));
}

}  // namespace wick
