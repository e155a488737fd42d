// Private: what a resume's config changes of the run it continues, in the settings that shape
// training but that a resume may change ([task] and the [[hooks]] instances: adding mixup or
// another seed of the task's data). The checkpoint keeps its run's config (Config::toml) and a
// resume names the differences, so a run that trains otherwise than the interrupted one would
// have is never silent.
#pragma once

#include <string>
#include <vector>

namespace wick {

// Lines such as "task.seed: 1 -> 2", "hooks.mixup: added", "hooks.freeze: removed" or
// "hooks.ema.decay: (unset) -> 0.99", comparing two Config::toml() texts (hooks by instance
// name, enabled ones only). Empty when either text does not parse.
std::vector<std::string> config_changes(const std::string& then_toml, const std::string& now_toml);

}  // namespace wick
