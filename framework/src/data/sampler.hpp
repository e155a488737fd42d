// Private: which samples each batch of an epoch holds, on each data-parallel rank, and the
// seeds that make data randomness reproducible. The order is a function of (seed, epoch) and
// the geometry alone, so that a resumed run sees the same batches.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "wick/state.hpp"

namespace wick {

struct Sharding {
  std::int64_t world = 1;
  std::int64_t rank = 0;
};

// splitmix64 of (seed, epoch): distinct, well-mixed seeds per epoch.
std::uint64_t epoch_seed(std::int64_t seed, std::int64_t epoch);
// The seed of the generator a Dataset::get receives for one batch.
std::uint64_t fetch_seed(std::int64_t seed, Phase phase, std::int64_t epoch, std::int64_t batch);

// Training: the epoch's permutation (or 0..n-1), padded by wrapping to a multiple of the world
// size and dealt round-robin (DistributedSampler: rank r takes r, r + world, ...), so every
// rank runs the same number of batches.
at::Tensor train_order(std::int64_t seed, std::int64_t epoch, std::int64_t n, bool shuffle,
                       Sharding s);
// Validation: 0..n-1 in contiguous, unpadded shards, so reduced metrics count each sample once.
at::Tensor valid_order(std::int64_t n, Sharding s);

// Batches of `local` samples at batch size bs.
inline std::int64_t batches_of(std::int64_t local, std::int64_t bs, bool drop_last) {
  return drop_last ? local / bs : (local + bs - 1) / bs;
}

}  // namespace wick
