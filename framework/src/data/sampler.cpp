#include "data/sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>

#include <algorithm>
#include <cstdint>

#include "wick/params.hpp"  // ConfigError

namespace wick {

namespace {
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

std::uint64_t epoch_seed(std::int64_t seed, std::int64_t epoch) {
  return mix(static_cast<std::uint64_t>(seed) * 0x9E3779B97F4A7C15ull +
             static_cast<std::uint64_t>(epoch) + 1);
}

std::uint64_t fetch_seed(std::int64_t seed, Phase phase, std::int64_t epoch, std::int64_t batch) {
  const std::uint64_t e = epoch_seed(seed, epoch) ^ (phase == Phase::valid ? 0x5641ull : 0);
  return mix(e + 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(batch) + 1));
}

at::Tensor train_order(std::int64_t seed, std::int64_t epoch, std::int64_t n, bool shuffle,
                       Sharding s, std::int64_t offset) {
  at::Tensor order;
  if (shuffle) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(epoch_seed(seed, epoch));
    order = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
  } else {
    order = at::arange(n, at::kLong);
  }
  if (offset > 0) {
    order = order.slice(0, std::min(offset, n));
    n = order.size(0);
  }
  if (s.world <= 1) return order;
  const std::int64_t total = (n + s.world - 1) / s.world * s.world;
  if (total > n) order = at::cat({order, order.slice(0, 0, total - n)});
  return order.slice(0, s.rank, total, s.world).contiguous();
}

at::Tensor valid_order(std::int64_t n, Sharding s) {
  at::Tensor order = at::arange(n, at::kLong);
  if (s.world <= 1) return order;
  // As even as can be (the first n % world shards one longer): with n >= world no rank is
  // left without a sample, as n rounded up per rank would leave the last (4 over 3: 2, 2, 0).
  const std::int64_t per = n / s.world, longer = n % s.world;
  const std::int64_t begin = s.rank * per + std::min(s.rank, longer);
  return order.slice(0, begin, begin + per + (s.rank < longer ? 1 : 0));
}

void check_valid_shards(std::int64_t n, Sharding s, const std::string& what) {
  if (n >= s.world || s.world <= 1) return;
  throw ConfigError(what + " has " + std::to_string(n) + " sample(s), fewer than the " +
                    std::to_string(s.world) +
                    " ranks, and each rank validates a shard of at least one; give it at least " +
                    std::to_string(s.world) + " samples, or run fewer ranks (--nproc)");
}

}  // namespace wick
