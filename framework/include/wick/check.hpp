// What `wick check CONFIG` does, for host programs and tests in process: everything `wick fit`
// builds before training (hooks and their order, the task and its own checks, the model and
// its optimizers, metrics), nothing trained or written.
#pragma once

#include <string>

#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// Throws ConfigError (or the error of whatever refused to start) as `wick fit` would; returns
// the line `wick check` prints: "PATH: ok (task NAME, N hooks, M metrics)".
std::string check_config(const Config& cfg, const PluginFinder& finder);

}  // namespace wick

WICK_PUBLIC_END
