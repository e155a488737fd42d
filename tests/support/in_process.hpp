// For tests that build a Trainer in the test process: hooks from a [[hooks]] TOML snippet
// loaded from the built plugins, an in-test hook as a HookEntry, and quiet trainer options.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <wick/config.hpp>
#include <wick/loader.hpp>
#include <wick/trainer.hpp>

namespace wick::test {

inline std::vector<HookEntry> load_hooks(const std::string& toml) {
  auto cfg = Config::parse(toml, "/nonexistent/hooks.toml");
  PluginFinder finder({WICK_PLUGIN_DIR});
  return cfg.make_hooks(finder);
}

inline HookEntry entry(std::shared_ptr<Hook> h, const std::string& name, int order) {
  HookEntry e;
  e.hook = std::move(h);
  e.plugin = name;
  e.instance = name;
  e.order = order;
  return e;
}

// Unshuffled batches, no files written, no step records.
inline TrainerOptions options(std::int64_t batch, std::int64_t epochs = 1) {
  TrainerOptions o;
  o.batch_size = batch;
  o.epochs = epochs;
  o.shuffle = false;
  o.write_outputs = false;
  o.log_every = 0;
  return o;
}

}  // namespace wick::test
