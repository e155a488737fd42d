// Private: which samples each batch of an epoch holds, on each data-parallel rank, and the
// seeds that make data randomness reproducible. The order is a function of (seed, epoch) and
// the geometry alone, so that a resumed run sees the same batches.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "data/epoch_start.hpp"
#include "wick/state.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

namespace wick {

struct Sharding {
  std::int64_t world = 1;
  std::int64_t rank = 0;
};

// splitmix64 of (seed, epoch): distinct, well-mixed seeds per epoch.
std::uint64_t epoch_seed(std::int64_t seed, std::int64_t epoch);
// The seed of the generator a Dataset::get receives for one batch.
std::uint64_t fetch_seed(std::int64_t seed, Phase phase, std::int64_t epoch, std::int64_t batch);

// Training: the epoch's permutation (or 0..n-1) from `offset` on, padded by wrapping to a
// multiple of the world size and dealt round-robin (DistributedSampler: rank r takes r,
// r + world, ...), so every rank runs the same number of batches.
at::Tensor train_order(std::int64_t seed, std::int64_t epoch, std::int64_t n, bool shuffle,
                       Sharding s, std::int64_t offset = 0);
// Exported for their test (tests/test_evaluator.cpp).
WICK_PUBLIC_BEGIN
// Validation: 0..n-1 in contiguous, unpadded shards, so reduced metrics count each sample once;
// their sizes differ by at most one.
at::Tensor valid_order(std::int64_t n, Sharding s);
// Throws ConfigError when n samples of `what` ("the validation data") leave a rank without
// a validation shard: its pass would have no values to sum with the others'.
void check_valid_shards(std::int64_t n, Sharding s, const std::string& what);
WICK_PUBLIC_END

// Batches of `local` samples at batch size bs.
inline std::int64_t batches_of(std::int64_t local, std::int64_t bs, bool drop_last) {
  return drop_last ? local / bs : (local + bs - 1) / bs;
}

// The batch count of an epoch of n samples dealt from `start` (each rank runs as many).
inline std::int64_t epoch_batches(std::int64_t n, EpochStart start, std::int64_t world,
                                  std::int64_t bs, bool drop_last) {
  const std::int64_t left = n > start.offset ? n - start.offset : 0;
  return start.first_batch + batches_of((left + world - 1) / world, bs, drop_last);
}

// How many positions of the epoch's order `batch` batches consumed: dealing is round-robin, so
// the first k batches of every rank hold exactly the order's next k * bs * world samples.
inline std::int64_t order_consumed(std::int64_t n, EpochStart start, std::int64_t batch,
                                   std::int64_t world, std::int64_t bs) {
  const std::int64_t per_batch = bs * world, batches = batch - start.first_batch;
  if (start.offset >= n || (batches > 0 && batches > (n - start.offset) / per_batch)) return n;
  return start.offset + batches * per_batch;  // < n: no overflow
}

}  // namespace wick
