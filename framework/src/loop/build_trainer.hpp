// Private: what make_trainer() builds, from given trainer options, and the tuning probes'
// variant of it (tune/): the same task and optimizers with only the hooks that handle a stage.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "wick/config.hpp"

namespace wick {

// With `left_out` non-null, only the hooks with a stage handler (they change how a step
// trains) are kept; the others' instance names are appended to it.
std::unique_ptr<Trainer> build_trainer(const Config& cfg, const PluginFinder& finder, RunInfo run,
                                       TrainerOptions opts,
                                       std::vector<std::string>* left_out = nullptr);

// trainer.batch_size = "auto" (tune/batch_size.cpp): sets opts.batch_size and
// opts.batch_size_search, as make_trainer() documents.
void choose_auto_batch_size(const Config& cfg, const PluginFinder& finder, const RunInfo& run,
                            TrainerOptions& opts, bool probe);

}  // namespace wick
