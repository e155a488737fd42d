// Facts about a run, fixed for its duration, as typed values: what a plugin may ask of the
// host about the run without seeing the framework's classes.
#pragma once

#include <cstdint>
#include <string>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = -1;  // -1: the current device of that type

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  // "cpu", "cuda" or "cuda:N": the spelling LibTorch's torch::Device accepts.
  std::string str() const {
    if (is_cpu()) return "cpu";
    return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
  }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

// What the trainer does with a non-finite loss.
enum class NanPolicy : std::uint8_t {
  error,  // stop the fit, naming the step
  skip,   // skip the step (no backward, no optimizer step) and count it
  ignore  // train on
};

struct RunInfo {
  std::string config_path;  // absolute path of the config file ("" for a host program)
  std::string output_dir;   // absolute path of the run directory
  std::string resume;       // "", "latest", "auto" or a checkpoint path, from --resume
  Device device;            // resolved ("auto" has become cpu or cuda)
  std::int64_t seed = 0;
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;  // 0: no limit
  std::int64_t batch_size = 32;
  std::int64_t valid_batch_size = 32;  // resolved (0 in the config means batch_size)
  bool shuffle = true;
  bool drop_last = false;
  NanPolicy nan_policy = NanPolicy::error;
  std::int64_t world_size = 1;  // data-parallel processes
  std::int64_t rank = 0;        // this process
  // Since SDK 2.3: the config with its --set values applied, as TOML ("" in a host program
  // that built its Trainer from options).
  std::string config_toml;
  bool is_main_process() const { return rank == 0; }
};

}  // namespace wick

WICK_PUBLIC_END
