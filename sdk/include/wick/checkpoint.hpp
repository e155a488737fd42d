// Checkpoints as the framework builds them: the types of the Context's checkpoint services.
// The framework owns what a checkpoint holds (model, optimizer, RNG, loop state, pending
// gradients, the task's and every stateful hook's state, the number of records written) and
// how a folder is written (atomically, with a manifest of sizes and sha256 hashes) and read
// (as untrusted input). A checkpoint plugin owns the policy: when, where, which to keep.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// A point between steps: `batch` batches of `epoch` are done ({e + 1, 0} once epoch e ends).
struct Position {
  std::int64_t epoch = 0;
  std::int64_t batch = 0;
  bool operator==(const Position& o) const { return epoch == o.epoch && batch == o.batch; }
  bool operator!=(const Position& o) const { return !(*this == o); }
};

struct CheckpointInfo {
  std::string path;  // absolute path of the checkpoint folder
  Position position;
  std::int64_t optimizer_step = 0;
  std::int64_t records = 0;  // metrics records written when it was taken
  std::string reason;        // what the writer gave ("step", "epoch", "cancel", ...)
  std::uint64_t bytes = 0;   // of its files
};

// A checkpoint folder that cannot be used; what() says why (missing file, hash mismatch,
// a manifest that is not a wick manifest, a position outside the run, ...).
class WICK_EXPORT CheckpointError : public std::runtime_error {
 public:
  explicit CheckpointError(const std::string& why) : std::runtime_error(why) {}
};

}  // namespace wick

WICK_PUBLIC_END
