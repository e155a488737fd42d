// torch::data datasets as wick datasets. A LibTorch user's per-sample dataset
// (torch::data::datasets::Dataset<Self, torch::data::Example<>> with get(i) and size()),
// optionally mapped with torch::data transforms (`.map(Normalize<>(0.5, 0.5))`), becomes a
// wick::Dataset: the trainer's sampler decides the order (shuffle, resume, data-parallel
// shards as for any wick dataset), the samples of a batch are fetched in index order and
// stacked (torch::data::transforms::Stack). Random augmentation inside get(i) draws from
// wick::fetch_generator(), so a batch is the same whichever loader thread fetches it.
// This header includes LibTorch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "wick/task.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

template <typename TorchDataset>
class TorchDatasetAdapter : public Dataset {
 public:
  explicit TorchDatasetAdapter(TorchDataset ds) : ds_(std::move(ds)) {}

  std::int64_t size() const override {
    const auto n = ds_.size();
    return n ? static_cast<std::int64_t>(*n) : kUnsized;
  }

  Batch get(const at::Tensor& indices, Fetch&) override {
    const auto idx = indices.to(at::kLong).contiguous();
    std::vector<std::size_t> request(static_cast<std::size_t>(idx.numel()));
    const auto* p = idx.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < request.size(); ++i) request[i] = static_cast<std::size_t>(p[i]);
    auto out = ds_.get_batch(request);
    // A dataset already mapped with Stack returns one Example; otherwise stack here.
    if constexpr (std::is_same_v<decltype(out), torch::data::Example<>>) {
      return {out.data, out.target};
    } else {
      auto stacked = torch::data::transforms::Stack<>().apply_batch(std::move(out));
      return {stacked.data, stacked.target};
    }
  }

  TorchDataset& torch_dataset() { return ds_; }

 private:
  TorchDataset ds_;
};

// wick::from_torch_dataset(MyImages(root).map(torch::data::transforms::Normalize<>(0.5, 0.5)))
template <typename TorchDataset>
std::shared_ptr<Dataset> from_torch_dataset(TorchDataset ds) {
  return std::make_shared<TorchDatasetAdapter<std::decay_t<TorchDataset>>>(std::move(ds));
}

}  // namespace wick

WICK_PUBLIC_END
