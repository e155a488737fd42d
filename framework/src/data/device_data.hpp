// Private: trainer.data_on_device. A training set held in tensors (wick::TensorDataset) is
// copied to the run's CUDA device once, and each batch is gathered there by its indices: no
// gather, pinning and copy of the batch on the host per step.
#pragma once

#include <memory>
#include <string>

#include "wick/task.hpp"

namespace wick {

// `train`'s tensors on `device` (a CUDA device), or null on the CPU, where they already are.
// Throws ConfigError, prefixed with cfg_at, when the set is not a TensorDataset, and
// std::runtime_error when its tensors do not fit on the device.
std::shared_ptr<TensorDataset> on_device(const std::shared_ptr<Dataset>& train,
                                         const at::Device& device, const std::string& cfg_at);

}  // namespace wick
