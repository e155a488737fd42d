// Private: the ranks `wick launch` started (torchrun's environment), joined in a Gloo process
// group of wick's own for the work outside a fit that sums over them (evaluate, predict). A
// fit uses the collectives of its data-parallel hook (ddp) instead.
#pragma once

#include <cstdint>
#include <memory>

#include "wick/collectives.hpp"

namespace wick {

// Blocks until all `world` ranks have joined (MASTER_ADDR / MASTER_PORT). Throws ConfigError
// when the rendezvous variables are missing, std::runtime_error when it times out.
std::unique_ptr<Collectives> join_ranks(std::int64_t rank, std::int64_t world);

}  // namespace wick
