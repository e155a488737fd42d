// The weights a trained run is used with: a checkpoint of its fit, or the final weights the fit
// wrote (RUN_DIR/model.pt), named as `wick evaluate --checkpoint` names them. For host programs
// that use a trained run (the wick command, samples/gpt's generator).
#pragma once

#include <optional>
#include <string>

#include "wick/checkpoint.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

class Config;
class PluginFinder;
class Trainer;

// The weights a trained run is used with, and from where.
struct UsedWeights {
  std::string source;   // the checkpoint folder, or RUN_DIR/model.pt
  std::string weights;  // "trained", or the word of a hook's evaluation weights ("ema")
  std::optional<CheckpointInfo> checkpoint;  // when they come from a checkpoint
  // "the ema weights of CKPT (epoch 2, batch 0, optimizer step 1876)", for messages.
  std::string describe() const;
};

// Loads the weights `what` names into t: "latest" (the newest usable checkpoint of
// hooks.checkpoint.dir, damaged ones skipped with the reason on stderr; without any, the final
// weights RUN_DIR/model.pt), "best", "final" (RUN_DIR/model.pt), a checkpoint folder (as
// given, or inside the checkpoints folder) or the path of a model.pt. ConfigError when there is
// none to load, its message naming `option` (the program's flag for `what`; empty: the program
// was given the run folder for its latest weights, and the message names that folder).
// `evaluation`: from a checkpoint, the weights a hook keeps for evaluation (EMA's) where one
// does. `finder` finds the checkpoint plugin, whose declared default folder applies when the
// config sets none.
UsedWeights load_run_weights(const Config& cfg, const PluginFinder& finder, Trainer& t,
                             const std::string& what, bool evaluation,
                             const std::string& option = "--checkpoint");

// Checks that `used` are the weights `--weights WORD` asked for: "auto" (what validation used:
// a hook's evaluation weights where one kept them, else the trained ones; load with
// evaluation = true), "trained" (evaluation = false), or the word of a hook's weights ("ema"),
// which the checkpoint, or the final weights of a run without one, must hold. ConfigError
// naming what they hold and the word to use otherwise.
void check_weights_word(const UsedWeights& used, const std::string& word);

}  // namespace wick

WICK_PUBLIC_END
