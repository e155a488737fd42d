// The TOML config: parse, apply --set overrides, validate every key against its schema
// (built-in sections here, plugin tables against the plugin's declared parameters), and build
// the task, hooks and trainer. Errors are ConfigError "FILE:LINE:COL: message". Torch-free.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "wick/loader.hpp"
#include "wick/params.hpp"
#include "wick/schedule.hpp"
#include "wick/trainer.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN, WICK_INTERNAL

WICK_PUBLIC_BEGIN

namespace wick {

class Task;

class Config {
 public:
  // Reads and validates the built-in sections. `sets` are "section.key=value" overrides;
  // hook parameters are addressed by instance name: "hooks.grad_clip.max_norm=2".
  static Config load(const std::string& path, const std::vector<std::string>& sets = {});
  // Same, from text (for tests and host programs); `path` is used in messages and for
  // resolving relative [plugins] paths.
  static Config parse(const std::string& text, const std::string& path,
                      const std::vector<std::string>& sets = {});

  Config(Config&&) noexcept;
  Config& operator=(Config&&) noexcept;
  ~Config();

  const std::string& path() const;  // absolute
  // The whole config with its --set values applied, as TOML (RunInfo::config_toml).
  std::string toml() const;
  const TrainerOptions& trainer() const;
  const OptimizerOptions& optimizer() const;  // the first of optimizers()
  // [optimizer] (one entry, module "") or one entry per [optimizers.NAME], in config order.
  const std::vector<OptimizerOptions>& optimizers() const;
  bool has_optimizer() const;  // [optimizer] or [optimizers] present
  bool has_task() const;       // [task] present
  const std::string& task_plugin() const;
  // KEY of the first enabled [[hooks]] instance of PLUGIN when set as a string there (or by
  // --set): how `wick evaluate` finds hooks.checkpoint.dir.
  std::optional<std::string> hook_string(const std::string& plugin, const std::string& key) const;
  // The full search path: --plugin-path folders (extra), the [plugins] path entries (made
  // absolute relative to the config file's folder), WICK_PLUGIN_PATH, the install's folder.
  std::vector<std::string> search_path(const std::vector<std::string>& extra = {}) const;
  // The plugins the `wick` command adds by role when the config names none of them:
  // [plugins] data_parallel (default "ddp": ranks started without a data-parallel hook) and
  // profiler (default "profiler": `wick fit --profile`). The framework knows no plugin names.
  const std::string& data_parallel_plugin() const;
  const std::string& profiler_plugin() const;

  // Loads the hook plugins, validates their tables and constructs them (config order;
  // instances with enabled = false are left out).
  std::vector<HookEntry> make_hooks(const PluginFinder& finder) const;
  // Loads the metric plugins of [[metrics]], validates their tables and constructs them.
  std::vector<MetricEntry> make_metrics(const PluginFinder& finder) const;
  // Loads the task plugin, validates [task] and constructs it.
  std::shared_ptr<Task> make_task(const PluginFinder& finder) const;
  // [task] validated against the task plugin, its defaults filled in: what the task is
  // constructed with, for a host program that builds part of the task itself (the GPT
  // sample's generator builds its model from the task's shape keys).
  Params task_params(const PluginFinder& finder) const;
  // Validates [task] against the task plugin without constructing it (`wick check`).
  void check_task(const PluginFinder& finder) const;

  // Not exported with its class (wick/version.hpp).
  struct WICK_INTERNAL Impl;

 private:
  Config();
  std::unique_ptr<Impl> impl_;
};

// Everything `wick fit` builds from a config: task, optimizer, hooks, trainer. With
// trainer.batch_size = "auto" the size a resumed run began with (its summary.json) is kept;
// otherwise, when `probe_batch_size`, find_batch_size() (wick/tuning.hpp) chooses it, and
// without (check, evaluate, export) the run folder's choice or the default stands.
std::unique_ptr<Trainer> make_trainer(const Config& cfg, const PluginFinder& finder,
                                      RunInfo run = {}, bool probe_batch_size = true);

// "cpu", "cuda" or "cuda:N" as a Device; nullopt for anything else ("auto" included).
std::optional<Device> parse_device(const std::string& s);

// Suggests the closest candidate to a mistyped key ("" when none is close).
std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace wick

WICK_PUBLIC_END
