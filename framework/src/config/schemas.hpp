// Private: the optimizer tables' keys ([optimizer], an optimizer's groups; [trainer]'s are in
// trainer_options.hpp), in the same form as a plugin's declared parameters, so that one
// validator checks both (choices included: a value outside them is refused with a suggestion,
// at load time).
#pragma once

#include <vector>

#include "wick/loader.hpp"  // ParamInfo

namespace wick {

std::vector<ParamInfo> optimizer_schema();
std::vector<ParamInfo> group_schema();

}  // namespace wick
