#include "wick/loader.hpp"

#include <sys/stat.h>

#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "wick/system.hpp"

namespace wick {

namespace fs = std::filesystem;

struct PluginLibrary::Handle {
  boost::dll::shared_library lib;
  CreateFn* create = nullptr;
  DestroyFn* destroy = nullptr;
};

namespace {

// Loaded libraries, never unloaded: leaked on purpose so that no static destructor closes a
// library whose objects may still be alive (see the lifetime rule in loader.hpp).
struct Loaded {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const PluginLibrary>> by_path;
};
Loaded& loaded() {
  static auto* l = new Loaded;
  return *l;
}

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// A choice parameter's allowed values. Its default must be one of them: a plugin bug otherwise,
// reported naming the plugin (before any config is read against it).
void read_choices(const wick_param_info& cp, ParamInfo& pi, const std::string& plugin,
                  const std::string& path) {
  std::string listed;
  for (std::uint32_t i = 0; cp.choices && i < cp.num_choices; ++i) {
    pi.choices.push_back(cp.choices[i] ? cp.choices[i] : "");
    listed += (i ? ", \"" : "\"") + pi.choices.back() + "\"";
  }
  auto bug = [&](const std::string& what) {
    return PluginError(PluginError::Kind::bad_param,
                       "plugin '" + plugin + "' (" + path + ") declares choice parameter '" +
                           pi.key + "' " + what + " (a bug in the plugin: fix its param_choice)");
  };
  if (pi.choices.empty()) throw bug("without choices");
  if (!pi.default_toml) return;
  // The default is a TOML basic string, as PluginDef writes it: "..." with \" and \\ escaped.
  std::string quoted;
  for (const auto& c : pi.choices) {
    quoted = "\"";
    for (char ch : c)
      quoted += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
    if (*pi.default_toml == quoted + "\"") return;
  }
  throw bug("with default " + *pi.default_toml + ", which is not one of its choices " + listed);
}

}  // namespace

void check_not_world_writable(const std::string& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  if (st.st_mode & S_IWOTH)
    throw PluginError(PluginError::Kind::unsafe_path,
                      std::string("refusing plugin ") + what + " '" + path +
                          "': it is world-writable (mode " + octal_mode(st.st_mode) +
                          "), so anyone could plant code in it; run: chmod o-w '" + path + "'");
}

// Runs the plugin's factory. A constructor's std::exception (a ConfigError from p.error, say)
// passes through; anything else it throws becomes an error naming the plugin, not a terminate.
void* PluginLibrary::construct(const Params& p) const {
  try {
    return handle_->create(p);
  } catch (const std::exception&) {
    throw;
  } catch (...) {
    throw PluginError(PluginError::Kind::load_failed,
                      "plugin '" + info_.name + "' (" + info_.path +
                          "): its constructor threw an exception that is not a std::exception "
                          "(a bug in the plugin: throw std::runtime_error or p.error(...))");
  }
}

std::shared_ptr<Hook> PluginLibrary::create_hook(const Params& p) const {
  if (info_.kind != PluginKind::hook)
    throw PluginError(PluginError::Kind::wrong_kind,
                      "plugin '" + info_.name + "' (" + info_.path +
                          ") is a task plugin; use it as [task] plugin = \"" + info_.name + "\"");
  auto* raw = static_cast<Hook*>(construct(p));
  if (!raw)
    throw PluginError(PluginError::Kind::missing_factory,
                      "plugin '" + info_.name + "' factory returned nothing");
  // The deleter keeps the library handle alive as long as the object (and libraries are
  // never unloaded anyway).
  auto h = handle_;
  return std::shared_ptr<Hook>(raw, [h](Hook* x) { h->destroy(x); });
}

std::shared_ptr<Task> PluginLibrary::create_task(const Params& p) const {
  if (info_.kind != PluginKind::task)
    throw PluginError(PluginError::Kind::wrong_kind,
                      "plugin '" + info_.name + "' (" + info_.path +
                          ") is a hook plugin; enable it under [[hooks]], not as [task] plugin");
  auto* raw = static_cast<Task*>(construct(p));
  if (!raw)
    throw PluginError(PluginError::Kind::missing_factory,
                      "plugin '" + info_.name + "' factory returned nothing");
  auto h = handle_;
  return std::shared_ptr<Task>(raw, [h](Task* x) { h->destroy(x); });
}

std::shared_ptr<const PluginLibrary> load_plugin_library(const std::string& path_in) {
  std::error_code ec;
  fs::path path = fs::weakly_canonical(fs::absolute(path_in), ec);
  if (ec || !fs::is_regular_file(path))
    throw PluginError(PluginError::Kind::not_found, "no plugin library at '" + path_in + "'");
  const std::string p = path.string();
  auto& L = loaded();
  std::lock_guard<std::mutex> lock(L.mu);
  if (auto it = L.by_path.find(p); it != L.by_path.end()) return it->second;

  check_not_world_writable(path.parent_path().string(), "folder");
  check_not_world_writable(p, "file");

  auto handle = std::make_shared<PluginLibrary::Handle>();
  try {
    handle->lib.load(boost::dll::fs::path(p),
                     boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw PluginError(PluginError::Kind::load_failed,
                      "cannot load '" + p + "': " + e.what() +
                          " (is it built for this machine, with its libraries installed?)");
  }
  if (!handle->lib.has("wick_plugin_info"))
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' is not a wick plugin: it exports no 'wick_plugin_info' "
                          "(a plugin declares itself with WICK_PLUGIN(Class, ...) from "
                          "<wick/plugin.hpp>)");
  auto& info_fn = handle->lib.get_alias<InfoFn>("wick_plugin_info");
  const wick_plugin_info* ci = info_fn();
  if (!ci || ci->magic != WICK_INFO_MAGIC)
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' is not a wick plugin: its 'wick_plugin_info' record has no "
                          "wick signature");
  const std::string name = ci->name ? ci->name : "?";
  if (ci->api_major != WICK_API_MAJOR || ci->api_minor > WICK_API_MINOR)
    throw PluginError(
        PluginError::Kind::api_mismatch,
        "wrong SDK API version on plugin '" + name + "' (" + p + "): got version " +
            std::to_string(ci->api_major) + "." + std::to_string(ci->api_minor) +
            ", this wick supports " + std::to_string(WICK_API_MAJOR) + ".0 to " +
            std::to_string(WICK_API_MAJOR) + "." + std::to_string(WICK_API_MINOR) +
            " (same major, minor not newer); " +
            (ci->api_major == WICK_API_MAJOR
                 ? std::string("the plugin needs a newer wick: upgrade wick, or rebuild the "
                               "plugin against this wick's SDK")
                 : std::string("rebuild the plugin against this wick's SDK "
                               "(find_package(wick) and wick_add_plugin)")));
  if (!handle->lib.has("wick_plugin_create") || !handle->lib.has("wick_plugin_destroy"))
    throw PluginError(PluginError::Kind::missing_factory,
                      "plugin '" + name + "' (" + p +
                          ") has no factory: it does not export "
                          "'wick_plugin_create' and 'wick_plugin_destroy' (declare it with "
                          "WICK_PLUGIN(Class, ...), which "
                          "exports them)");
  handle->create = &handle->lib.get_alias<CreateFn>("wick_plugin_create");
  handle->destroy = &handle->lib.get_alias<DestroyFn>("wick_plugin_destroy");

  PluginInfo info;
  info.name = name;
  info.version = ci->version ? ci->version : "";
  info.description = ci->description ? ci->description : "";
  info.kind = static_cast<PluginKind>(ci->kind);
  info.default_order = ci->default_order;
  info.main_process_only = (ci->flags & kMainProcessOnly) != 0;
  info.api_major = ci->api_major;
  info.api_minor = ci->api_minor;
  info.path = p;
  for (std::uint32_t i = 0; i < ci->num_params; ++i) {
    const auto& cp = ci->params[i];
    ParamInfo pi;
    pi.key = cp.key ? cp.key : "";
    pi.type = static_cast<ParamType>(cp.type);
    if (cp.default_toml) pi.default_toml = cp.default_toml;
    pi.help = cp.help ? cp.help : "";
    if (pi.type == ParamType::choice) read_choices(cp, pi, name, p);
    info.params.push_back(std::move(pi));
  }
  auto lib = std::make_shared<const PluginLibrary>(std::move(info), std::move(handle));
  L.by_path.emplace(p, lib);
  return lib;
}

std::vector<std::string> plugin_search_path(const std::vector<std::string>& from_config) {
  std::vector<std::string> dirs = from_config;
  if (const char* env = std::getenv("WICK_PLUGIN_PATH")) {
    std::string s = env;
    std::size_t start = 0;
    while (start <= s.size()) {
      auto end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      std::string entry = s.substr(start, end - start);
      // Empty or relative entries would mean the current directory: never by default.
      if (!entry.empty() && fs::path(entry).is_absolute()) dirs.push_back(entry);
      start = end + 1;
    }
  }
  auto def = default_plugin_dir();
  if (!def.empty()) dirs.push_back(def);
  // Drop repeats of one folder, keeping the first.
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (auto& d : dirs) {
    std::error_code ec;
    auto c = fs::weakly_canonical(d, ec).string();
    if (seen.insert(c).second) out.push_back(c);
  }
  return out;
}

PluginFinder::PluginFinder(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}

std::shared_ptr<const PluginLibrary> PluginFinder::find(const std::string& name) const {
  std::vector<std::string> hits;
  const std::string file = "wick_" + name + ".so";
  for (const auto& d : dirs_) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    auto f = fs::path(d) / file;
    if (fs::exists(f, ec)) {
      check_not_world_writable(d, "folder");
      hits.push_back(f.string());
    }
  }
  if (hits.empty()) {
    std::string searched;
    for (const auto& d : dirs_) searched += "\n  " + d;
    if (searched.empty()) searched = "\n  (no folders)";
    throw PluginError(PluginError::Kind::not_found,
                      "no plugin named '" + name + "' (looked for " + file + " in:" + searched +
                          ")\nrun `wick plugins` to list what is installed, or add its folder "
                          "to [plugins] path or WICK_PLUGIN_PATH");
  }
  if (hits.size() > 1)
    throw PluginError(PluginError::Kind::duplicate,
                      "two plugins named '" + name + "': " + hits[0] + " and " + hits[1] +
                          "; remove one, or take its folder out of the plugin path");
  auto lib = load_plugin_library(hits[0]);
  if (lib->info().name != name)
    throw PluginError(PluginError::Kind::name_mismatch,
                      "'" + hits[0] + "' declares plugin '" + lib->info().name + "', not '" + name +
                          "'; name the file wick_" + lib->info().name + ".so");
  return lib;
}

PluginFinder::Scan PluginFinder::scan() const {
  Scan out;
  std::map<std::string, std::string> name_to_path;
  for (const auto& d : dirs_) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    try {
      check_not_world_writable(d, "folder");
    } catch (const PluginError& e) {
      out.problems.push_back(e.what());
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& ent : fs::directory_iterator(d, ec))
      if (ent.path().extension() == ".so") files.push_back(ent.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      try {
        auto lib = load_plugin_library(f.string());
        const auto& n = lib->info().name;
        if (auto it = name_to_path.find(n); it != name_to_path.end()) {
          out.problems.push_back("two plugins named '" + n + "': " + it->second + " and " +
                                 lib->info().path + "; remove one");
          continue;
        }
        name_to_path[n] = lib->info().path;
        out.plugins.push_back(lib);
      } catch (const PluginError& e) {
        out.problems.push_back(e.what());
      }
    }
  }
  return out;
}

}  // namespace wick
