// Private: the [trainer] table's options, each declared once (key, type, doc, where it goes in
// TrainerOptions, what its value must be). The schema that validates the table (its defaults
// are a default TrainerOptions' values) and the reading of the table come from it; RunInfo's
// view of the options (view_options) is beside it, used by the config and the Trainer alike.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "wick/loader.hpp"   // ParamInfo
#include "wick/options.hpp"  // TrainerOptions
#include "wick/params.hpp"   // Params
#include "wick/run.hpp"      // RunInfo
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for the test that compares the table with TrainerOptions (tests/test_config.cpp).
WICK_PUBLIC_BEGIN

namespace wick {

struct TrainerOption {
  ParamInfo info;  // key, type, doc, choices; the default is TrainerOptions{}'s
  // Takes the option's value from a table validated against trainer_schema() into `o`, and
  // returns "" or what the value must be ("must be >= 0 (0: no limit)").
  std::function<std::string(const Params&, TrainerOptions&)> read;
};

const std::vector<TrainerOption>& trainer_options();
std::vector<ParamInfo> trainer_schema();

// The run's facts that are trainer options, as plugins see them (RunInfo), with the device
// "auto" resolved to `device`. The rest (paths, ranks, resume) is the caller's.
void view_options(const TrainerOptions& o, const Device& device, RunInfo& r);

}  // namespace wick

WICK_PUBLIC_END
