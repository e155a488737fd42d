// Finding, checking and loading plugin libraries (Boost.DLL). Torch-free.
//
// Lifetime rule: a library, once loaded, stays loaded until the process exits. Objects,
// std::functions, exceptions and deleters that came from a plugin may then never outlive
// its code, whatever order things are destroyed in (Boost.DLL's misuse list).
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "wick/params.hpp"
#include "wick/plugin.hpp"
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

class Task;
class Metric;

struct ParamInfo {
  std::string key;
  ParamType type;
  std::optional<std::string> default_toml;  // nullopt: required
  std::string help;
  std::vector<std::string> choices = {};  // ParamType::choice: the allowed values
};

struct PluginInfo {
  std::string name, version, description;
  PluginKind kind = PluginKind::hook;
  int default_order = 0;
  bool main_process_only = false;
  bool one_instance = false;  // PluginDef::one_instance
  int api_major = 0, api_minor = 0;
  std::vector<ParamInfo> params;
  std::string path;  // absolute path of the library
  // Declared in a multi-plugin library (WICK_PLUGINS) among `library_size` plugins.
  bool in_library = false;
  std::size_t library_size = 1;
  // What its build record says it was compiled against: "LibTorch 2.11.0 (CUDA, C++11 ABI)",
  // "no LibTorch"; "" for a library built before SDK 2.5 (no record).
  std::string torch_build;
};

class WICK_EXPORT PluginError : public std::runtime_error {
 public:
  enum class Kind {
    not_found,
    load_failed,
    not_a_plugin,
    api_mismatch,
    missing_factory,
    duplicate,
    unsafe_path,
    wrong_kind,
    name_mismatch,
    malformed,      // a record or plugin list that cannot be right: null, unreadable or absurd
                    // names, counts, types, defaults or choices
    torch_mismatch  // built against another LibTorch than this wick's (refused before loading)
  };
  PluginError(Kind k, const std::string& msg) : std::runtime_error(msg), kind(k) {}
  Kind kind;
};

class PluginLibrary {
 public:
  const PluginInfo& info() const { return info_; }
  // Run the factory. Exceptions from the plugin's constructor pass through.
  std::shared_ptr<Hook> create_hook(const Params& p) const;
  std::shared_ptr<Task> create_task(const Params& p) const;
  std::shared_ptr<Metric> create_metric(const Params& p) const;

  struct Handle;
  PluginLibrary(PluginInfo info, std::shared_ptr<Handle> h)
      : info_(std::move(info)), handle_(std::move(h)) {}

 private:
  void* construct(const Params& p) const;
  template <class T>
  std::shared_ptr<T> create(PluginKind kind, const Params& p) const;
  PluginInfo info_;
  std::shared_ptr<Handle> handle_;
};

// "a metric plugin; enable it under [[metrics]] plugin = \"f1\"": what the plugin is and how a
// config uses it, for a plugin named where another kind belongs.
std::string how_to_use(const PluginInfo& i);

// Loads one library and checks it is a wick plugin of a compatible SDK version; the factory
// is not run. The same file loaded twice gives the same object. Throws PluginError.
// A multi-plugin library (WICK_PLUGINS) holding exactly one plugin is accepted too.
std::shared_ptr<const PluginLibrary> load_plugin_library(const std::string& path);
// Every plugin a library declares: one for WICK_PLUGIN, the list for WICK_PLUGINS (in its
// order). The list is checked whole before any plugin of it is returned.
std::vector<std::shared_ptr<const PluginLibrary>> load_plugin_libraries(const std::string& path);

// File names: wick_NAME.so holds the plugin NAME; wicklib_ANY.so holds a list of plugins.
inline constexpr const char* kPluginLibraryPrefix = "wicklib_";

// Refuses a world-writable file or folder (anyone could plant code there).
void check_not_world_writable(const std::string& path, const char* what);

// The plugin search path, in order: config [plugins] path entries (already made absolute),
// then WICK_PLUGIN_PATH (absolute entries only), then the install's own plugin folder.
// Never the current directory unless a config names it.
std::vector<std::string> plugin_search_path(const std::vector<std::string>& from_config);

class PluginFinder {
 public:
  explicit PluginFinder(std::vector<std::string> dirs);
  const std::vector<std::string>& dirs() const { return dirs_; }
  // The plugin named `name`: file wick_<name>.so in the search path, or a plugin of that
  // name in a multi-plugin library (wicklib_*.so) there. Errors when it is missing (listing
  // the folders searched), found twice (two files, or a file and a library's declaration),
  // or wick_<name>.so declares another name. A broken multi-plugin library does not stop the
  // search for a plugin found elsewhere; it is named when the plugin is not found.
  std::shared_ptr<const PluginLibrary> find(const std::string& name) const;

  struct Scan {
    std::vector<std::shared_ptr<const PluginLibrary>> plugins;
    std::vector<std::string> problems;  // one message per file that could not be used
  };
  // Every *.so in the search path, every plugin of a multi-plugin library (`wick plugins`).
  Scan scan() const;

 private:
  std::vector<std::string> dirs_;
};

}  // namespace wick

WICK_PUBLIC_END
