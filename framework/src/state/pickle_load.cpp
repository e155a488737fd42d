#include "state/pickle_load.hpp"

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>

#include <memory>

namespace wick {

c10::IValue load_pickle(const std::string& bytes, std::optional<c10::Device> device) {
  // torch::pickle_load's reading, which takes no device: the same archive reader with one.
  auto adapter = std::make_shared<caffe2::serialize::MemoryReadAdapter>(
      bytes.data(), static_cast<off_t>(bytes.size()));
  caffe2::serialize::PyTorchStreamReader reader(adapter);
  // LibTorch 1.13 takes a c10::optional, 2.x a std::optional: a Device or {} suits both.
  using torch::jit::readArchiveAndTensors;
  return device ? readArchiveAndTensors("data", "", "", {}, {}, *device, reader)
                : readArchiveAndTensors("data", "", "", {}, {}, {}, reader);
}

}  // namespace wick
