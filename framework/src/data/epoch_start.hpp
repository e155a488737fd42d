// Private: where the dealt part of an epoch's order begins (data/sampler.hpp deals it).
// Torch-free: the loop's place (loop/loop_state.hpp) holds one.
#pragma once

#include <cstdint>

namespace wick {

// Batches from first_batch on take the order's samples from position offset on. (0, 0) but in
// the epoch a run resumed in on another world size or batch size: it deals the samples not yet
// seen anew.
struct EpochStart {
  std::int64_t first_batch = 0;
  std::int64_t offset = 0;
};

}  // namespace wick
