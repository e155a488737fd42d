// Private: storage behind wick::StateDict (needs LibTorch).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <variant>

#include "wick/state_dict.hpp"

namespace wick {

// Hidden, as its declaration in wick/state_dict.hpp says.
struct StateDict::Impl {
  std::map<std::string, std::variant<std::int64_t, double, std::string, at::Tensor>> values;
};

}  // namespace wick
