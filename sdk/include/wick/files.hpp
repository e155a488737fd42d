// Files a plugin writes into the run directory.
#pragma once

#include <string>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// Replaces `path` with `bytes` atomically: a temporary file beside it, fsync, rename, fsync
// of the folder. A reader sees the old content or the new, never half of it. Throws
// std::runtime_error naming the file and the cause.
WICK_EXPORT void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace wick

WICK_PUBLIC_END
