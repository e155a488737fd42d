// The training set on the device (device_data.hpp).
#include "data/device_data.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <exception>
#include <stdexcept>

#include "wick/params.hpp"  // ConfigError

namespace wick {

std::shared_ptr<TensorDataset> on_device(const std::shared_ptr<Dataset>& train,
                                         const at::Device& device, const std::string& cfg_at) {
  // Checked on the CPU too, so that a config behaves alike on either device.
  const auto* held = dynamic_cast<const TensorDataset*>(train.get());
  if (!held)
    throw ConfigError(cfg_at +
                      "trainer.data_on_device = true needs a training set held in tensors "
                      "(wick::TensorDataset); this task's loads its samples in get(): set "
                      "trainer.data_on_device = false");
  if (!device.is_cuda()) return nullptr;
  const std::int64_t bytes = held->input().nbytes() + held->target().nbytes();
  try {
    return std::make_shared<TensorDataset>(held->input().to(device), held->target().to(device));
  } catch (const std::exception& e) {
    throw std::runtime_error("trainer.data_on_device: the training set (" +
                             std::to_string(bytes >> 20) + " MiB) could not be copied to " +
                             device.str() + " (" + e.what() +
                             "); set trainer.data_on_device = false to copy each batch instead");
  }
}

}  // namespace wick
