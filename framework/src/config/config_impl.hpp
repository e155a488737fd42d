// Private: the config as read (Config::Impl): the parsed TOML with the places of its values
// (file:line:col, or the --set that gave one), the built-in tables as read, and the checks that
// name a value's place. config.cpp loads and validates a file; validate_table.cpp checks a
// table against a schema (a plugin's parameters, or a built-in table's); read_optimizer.cpp
// reads one optimizer's table.
#pragma once

#include <toml++/toml.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/params_impl.hpp"
#include "config/trainer_options.hpp"
#include "system/error_text.hpp"
#include "wick/cluster.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/system.hpp"

namespace wick {

// Hidden, as its declaration in wick/config.hpp says.
struct Config::Impl {
  std::string path;  // absolute
  toml::table root;
  // --set values: node -> ("--set k=v", raw value text), for messages and string coercion.
  std::map<const toml::node*, std::pair<std::string, std::string>> overrides;
  TrainerOptions trainer;
  Device device;  // trainer.device as the run uses it ("auto" resolved once, when read)
  std::vector<OptimizerOptions> optimizers;  // one, or one per [optimizers.NAME]
  bool has_optimizer = false;
  std::string task_plugin;
  std::string data_parallel_plugin = "ddp", profiler_plugin = "profiler";  // [plugins] roles
  std::vector<std::string> plugin_dirs;

  std::string where(const toml::source_region& r) const {
    if (r.begin.line == 0) return path;
    return path + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
  }
  std::string where(const toml::node& n) const {
    if (auto it = overrides.find(&n); it != overrides.end()) return it->second.first;
    return where(n.source());
  }
  ConfigError error(const std::string& w, const std::string& msg) const {
    return ConfigError(w + ": " + msg);
  }
  // A value wrong on its face: "'KEY' in SECTION MSG" at the key's place (at `table_where`
  // when the key was not written, its default being wrong).
  void check(const Params& p, const char* key, bool ok, const std::string& msg,
             const std::string& section, const std::string& table_where) const {
    if (ok) return;
    const auto& e = p.impl().entries.at(key);
    throw error(e.where.empty() ? table_where : e.where,
                std::string("'") + key + "' in " + section + " " + msg);
  }

  // nan passes every range check written as "x < lo || x > hi", so no parameter takes it;
  // inf passes "x > 0", and 1e300 is inf once training uses it in float32 (a non-zero 1e-50,
  // 0): a float parameter is finite and within float32's range, inf only where declared.
  double checked_float(double v, const toml::node& n, const std::string& key,
                       const std::string& section, bool inf_allowed) const;

  // Converts one value to its declared type; throws with its place when it does not fit.
  ParamValue convert(const toml::node& n, ParamType t, const std::string& key,
                     const std::string& section) const;
  // A choice parameter's value must be one of its choices (its default was checked when the
  // plugin was loaded).
  void check_choice(const std::string& value, const ParamInfo& p, const toml::node& n,
                    const std::string& section) const;
  // Validates a table against a schema: unknown keys (with a suggestion), types, required
  // keys. Keys in `reserved` are allowed and skipped.
  Params validate(const toml::table& tbl, const std::vector<ParamInfo>& schema,
                  const std::string& section, const std::vector<std::string>& reserved,
                  const std::string& plugin, const std::string& instance) const;
  // One optimizer's table: its options and its [[...groups]].
  OptimizerOptions read_optimizer(const toml::table* ot, const std::string& section,
                                  const std::string& module) const;

  void apply_set(const std::string& set);
  void validate_builtin();
  void validate_instances(const std::string& array, bool ordered);
  // One enabled instance of [[hooks]] or [[metrics]]: its plugin found, of the array's kind,
  // and its table validated against the plugin's parameters.
  struct Instance {
    const toml::table* table;
    std::string plugin, name;
    std::shared_ptr<const PluginLibrary> lib;
    Params params;
  };
  std::vector<Instance> instances(const PluginFinder& finder, const std::string& array,
                                  PluginKind kind, const std::vector<std::string>& reserved) const;
  // Runs an instance's factory: its ConfigErrors pass, other errors name the instance.
  template <class Make>
  auto construct(const Instance& i, Make make) const {
    try {
      return make();
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& ex) {
      throw ConfigError(where(i.table->source()) + ": plugin '" + i.plugin + "' (instance '" +
                        i.name + "') could not start: " + without_backtraces(ex.what()));
    }
  }

  // The plugin an instance table names, of the kind its array holds.
  std::shared_ptr<const PluginLibrary> find_plugin(const PluginFinder& finder, const toml::table& t,
                                                   PluginKind kind) const {
    const toml::node& pn = *t.get("plugin");
    std::shared_ptr<const PluginLibrary> lib;
    try {
      lib = finder.find(*pn.value<std::string>());
    } catch (const PluginError& e) {
      throw ConfigError(where(pn) + ": " + e.what());
    }
    if (lib->info().kind != kind)
      throw ConfigError(where(pn) + ": plugin '" + lib->info().name + "' is " +
                        how_to_use(lib->info()));
    return lib;
  }
  const toml::table* hook_table(std::size_t i) const;
  Params plugin_params(const toml::table& tbl, const PluginInfo& info, const std::string& section,
                       const std::vector<std::string>& reserved,
                       const std::string& instance) const {
    Params p = validate(tbl, info.params, section, reserved, info.name, instance);
    p.impl().run = run_facts();
    return p;
  }
  // What a plugin's constructor may know of the run (Params::run).
  RunInfo run_facts() const {
    RunInfo r;
    r.config_path = path;
    r.output_dir = std::filesystem::absolute(trainer.output_dir).lexically_normal().string();
    view_options(trainer, device, r);
    const JobRanks job = job_ranks();
    r.world_size = job.world;
    r.rank = job.rank;
    return r;
  }
};

}  // namespace wick
