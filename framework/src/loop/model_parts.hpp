// Checks on the parts of a task's model (TorchScript parts, wick/jit.hpp), and on its
// weights' values.
#pragma once

#include <string>

namespace torch::nn {
class Module;
}

namespace wick {

// Throws std::runtime_error when a TorchScript part's tensor (a wick::JitModule's parameter
// or buffer) is also a tensor of the rest of the model, or when a parameter is registered
// under two names: the optimizer would step it twice, or train what a part says is frozen.
void check_model_parts(const torch::nn::Module& model);

// The name of the model's first parameter that holds a value that is not finite, or "" (one
// read for the whole model).
std::string first_non_finite(const torch::nn::Module& model);

}  // namespace wick
