// Private: one throwaway fit of a config's run for the tuning tools (wick/tuning.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "wick/config.hpp"

namespace wick {

struct ProbeRun {
  FitResult result;
  std::vector<std::string> left_out;  // hook instances without a stage handler
};

// Trains the config's task with `opts` (outputs, records and FLOPs off; epochs unbounded: the
// `driver` hook, scheduled first of all, ends the fit by throwing CancelFit) and the hooks that
// handle a stage. A completed or cancelled fit is returned; a failed one too, for the caller
// to judge (out of memory); a configuration error is thrown as ConfigError.
ProbeRun run_probe(const Config& cfg, const PluginFinder& finder, TrainerOptions opts,
                   std::shared_ptr<Hook> driver, const std::string& name);

}  // namespace wick
