// The collectives' timeout of ddp and zero3 (their `timeout_s`), checked where it is read.
#pragma once

#include <wick/params.hpp>

#include <chrono>
#include <cstdint>

namespace wick_ddp {

// At least a millisecond (what c10d counts in) and at most a week: beyond that the
// milliseconds would not fit c10d's clock arithmetic, and a rank that waits a week is dead.
inline std::chrono::milliseconds collective_timeout(const wick::Params& p) {
  const double s = p.get_float("timeout_s");
  constexpr double kMost = 7 * 24 * 3600.0;
  if (!(s >= 0.001 && s <= kMost))
    throw p.error("timeout_s", "must be seconds in [0.001, 604800] (a week)");
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0));
}

}  // namespace wick_ddp
