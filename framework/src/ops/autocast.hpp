// Private: whether bf16 autocast is on for a device type. wick's ops then hand their results to
// the matrix products that follow in bf16, the type autocast would cast them to.
#pragma once

#include <c10/core/DeviceType.h>

#include "wick/torch_compat.hpp"

namespace wick {

inline bool bf16_autocast(c10::DeviceType d) {
  return compat::autocast_enabled(d) && compat::autocast_dtype(d) == at::kBFloat16;
}

}  // namespace wick
