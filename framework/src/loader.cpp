#include "wick/loader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "wick/system.hpp"

namespace wick {

namespace fs = std::filesystem;

// One plugin's factory pair, and the library that holds it (shared by the plugins of a
// multi-plugin library).
struct PluginLibrary::Handle {
  std::shared_ptr<boost::dll::shared_library> lib;
  CreateFn* create = nullptr;
  DestroyFn* destroy = nullptr;
};

namespace {

// Loaded libraries, never unloaded: leaked on purpose so that no static destructor closes a
// library whose objects may still be alive (see the lifetime rule in loader.hpp).
struct Loaded {
  std::mutex mu;
  std::map<std::string, std::vector<std::shared_ptr<const PluginLibrary>>> by_path;
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

namespace {

// Upper bounds that no real plugin reaches: a larger count is a corrupt or hostile record,
// refused before the host walks that many entries.
constexpr std::uint32_t kMaxPluginsPerLibrary = 1024;
constexpr std::uint32_t kMaxParams = 4096;

bool valid_name(const char* s) {
  if (!s || !*s) return false;
  std::size_t n = 0;
  for (; s[n] && n <= 64; ++n)
    if (!(std::isalnum(static_cast<unsigned char>(s[n])) || s[n] == '_')) return false;
  return n <= 64;
}

std::string version_message(const std::string& name, const std::string& p, unsigned major,
                            unsigned minor) {
  return "wrong SDK API version on plugin '" + name + "' (" + p + "): got version " +
         std::to_string(major) + "." + std::to_string(minor) + ", this wick supports " +
         std::to_string(WICK_API_MAJOR) + ".0 to " + std::to_string(WICK_API_MAJOR) + "." +
         std::to_string(WICK_API_MINOR) + " (same major, minor not newer); " +
         (major == WICK_API_MAJOR
              ? std::string("the plugin needs a newer wick: upgrade wick, or rebuild the "
                            "plugin against this wick's SDK")
              : std::string("rebuild the plugin against this wick's SDK "
                            "(find_package(wick) and wick_add_plugin)"));
}

bool version_ok(unsigned major, unsigned minor) {
  return major == WICK_API_MAJOR && minor <= WICK_API_MINOR;
}

// Reads one plugin's record (after its signature and version were checked). `where` names
// the record in messages about a malformed one ("" for a single plugin's library).
PluginInfo read_info(const wick_plugin_info& ci, const std::string& p, const std::string& where) {
  auto malformed = [&](const std::string& what) {
    return PluginError(PluginError::Kind::malformed,
                       "'" + p + "'" + where + ": malformed plugin record: " + what +
                           " (a bug in the plugin, or not built with <wick/plugin.hpp>)");
  };
  if (!valid_name(ci.name))
    throw malformed(ci.name ? "its name is not letters, digits and '_' (at most 64)"
                            : "its name is null");
  const std::string name = ci.name;
  if (ci.kind > static_cast<std::uint32_t>(PluginKind::task))
    throw malformed("plugin '" + name + "' has an unknown kind " + std::to_string(ci.kind));
  if (ci.num_params > kMaxParams || (ci.num_params && !ci.params))
    throw malformed("plugin '" + name + "' declares " + std::to_string(ci.num_params) +
                    " parameters" + (ci.params ? "" : " and no table of them"));
  PluginInfo info;
  info.name = name;
  info.version = ci.version ? ci.version : "";
  info.description = ci.description ? ci.description : "";
  info.kind = static_cast<PluginKind>(ci.kind);
  info.default_order = ci.default_order;
  info.main_process_only = (ci.flags & kMainProcessOnly) != 0;
  info.api_major = ci.api_major;
  info.api_minor = ci.api_minor;
  info.path = p;
  for (std::uint32_t i = 0; i < ci.num_params; ++i) {
    const auto& cp = ci.params[i];
    if (!cp.key) throw malformed("plugin '" + name + "' has a parameter with a null key");
    ParamInfo pi;
    pi.key = cp.key;
    pi.type = static_cast<ParamType>(cp.type);
    if (cp.default_toml) pi.default_toml = cp.default_toml;
    pi.help = cp.help ? cp.help : "";
    if (pi.type == ParamType::choice) read_choices(cp, pi, name, p);
    info.params.push_back(std::move(pi));
  }
  return info;
}

// The plugins of a WICK_PLUGINS library. The list header is checked (signature, version,
// count) before any entry is read, and every entry before any is returned.
std::vector<std::shared_ptr<const PluginLibrary>> read_list(
    const std::shared_ptr<boost::dll::shared_library>& lib, const std::string& p) {
  auto malformed = [&](const std::string& what) {
    return PluginError(PluginError::Kind::malformed,
                       "'" + p + "': malformed plugin list: " + what +
                           " (a bug in the library, or not built with WICK_PLUGINS from "
                           "<wick/plugin.hpp>)");
  };
  const wick_plugin_list* cl = lib->get_alias<ListFn>("wick_plugin_list")();
  if (!cl || cl->magic != WICK_LIST_MAGIC)
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' is not a wick plugin library: its 'wick_plugin_list' has no wick "
                          "signature");
  if (!version_ok(cl->api_major, cl->api_minor))
    throw PluginError(PluginError::Kind::api_mismatch,
                      version_message("(plugin library)", p, cl->api_major, cl->api_minor));
  if (cl->count == 0 || cl->count > kMaxPluginsPerLibrary || !cl->entries)
    throw malformed(cl->entries ? "it declares " + std::to_string(cl->count) + " plugins (1 to " +
                                      std::to_string(kMaxPluginsPerLibrary) + " expected)"
                                : "its table of entries is null");
  std::vector<std::shared_ptr<const PluginLibrary>> out;
  std::set<std::string> names;
  for (std::uint32_t i = 0; i < cl->count; ++i) {
    const auto& e = cl->entries[i];
    const std::string where = " (entry " + std::to_string(i) + ")";
    if (!e.info) throw malformed("entry " + std::to_string(i) + " has no record");
    if (e.info->magic != WICK_INFO_MAGIC)
      throw malformed("entry " + std::to_string(i) + "'s record has no wick signature");
    const std::string name = valid_name(e.info->name) ? e.info->name : "?";
    if (!version_ok(e.info->api_major, e.info->api_minor))
      throw PluginError(PluginError::Kind::api_mismatch,
                        version_message(name, p, e.info->api_major, e.info->api_minor));
    PluginInfo info = read_info(*e.info, p, where);
    if (!e.create || !e.destroy)
      throw PluginError(PluginError::Kind::missing_factory,
                        "plugin '" + info.name + "' (" + p +
                            ") has no factory in its library's list (declare it with "
                            "WICK_ENTRY(Class, ...))");
    if (!names.insert(info.name).second)
      throw PluginError(PluginError::Kind::duplicate,
                        "'" + p + "' declares plugin '" + info.name + "' twice; remove one");
    info.in_library = true;
    info.library_size = cl->count;
    auto h = std::make_shared<PluginLibrary::Handle>();
    h->lib = lib;
    h->create = e.create;
    h->destroy = e.destroy;
    out.push_back(std::make_shared<const PluginLibrary>(std::move(info), std::move(h)));
  }
  return out;
}

}  // namespace

std::vector<std::shared_ptr<const PluginLibrary>> load_plugin_libraries(
    const std::string& path_in) {
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

  auto lib = std::make_shared<boost::dll::shared_library>();
  try {
    lib->load(boost::dll::fs::path(p),
              boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    throw PluginError(PluginError::Kind::load_failed,
                      "cannot load '" + p + "': " + e.what() +
                          " (is it built for this machine, with its libraries installed?)");
  }
  const bool single = lib->has("wick_plugin_info"), list = lib->has("wick_plugin_list");
  if (single && list)
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' exports both 'wick_plugin_info' and 'wick_plugin_list'; declare "
                          "its plugins with one WICK_PLUGINS(...) only");
  if (list) {
    auto plugins = read_list(lib, p);
    L.by_path.emplace(p, plugins);
    return plugins;
  }
  if (!single)
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' is not a wick plugin: it exports no 'wick_plugin_info' "
                          "(a plugin declares itself with WICK_PLUGIN(Class, ...) from "
                          "<wick/plugin.hpp>)");
  const wick_plugin_info* ci = lib->get_alias<InfoFn>("wick_plugin_info")();
  if (!ci || ci->magic != WICK_INFO_MAGIC)
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' is not a wick plugin: its 'wick_plugin_info' record has no "
                          "wick signature");
  const std::string name = ci->name ? ci->name : "?";
  if (!version_ok(ci->api_major, ci->api_minor))
    throw PluginError(PluginError::Kind::api_mismatch,
                      version_message(name, p, ci->api_major, ci->api_minor));
  if (!lib->has("wick_plugin_create") || !lib->has("wick_plugin_destroy"))
    throw PluginError(PluginError::Kind::missing_factory,
                      "plugin '" + name + "' (" + p +
                          ") has no factory: it does not export "
                          "'wick_plugin_create' and 'wick_plugin_destroy' (declare it with "
                          "WICK_PLUGIN(Class, ...), which "
                          "exports them)");
  PluginInfo info = read_info(*ci, p, "");
  auto handle = std::make_shared<PluginLibrary::Handle>();
  handle->lib = lib;
  handle->create = &lib->get_alias<CreateFn>("wick_plugin_create");
  handle->destroy = &lib->get_alias<DestroyFn>("wick_plugin_destroy");
  std::vector<std::shared_ptr<const PluginLibrary>> one{
      std::make_shared<const PluginLibrary>(std::move(info), std::move(handle))};
  L.by_path.emplace(p, one);
  return one;
}

std::shared_ptr<const PluginLibrary> load_plugin_library(const std::string& path) {
  auto all = load_plugin_libraries(path);
  if (all.size() != 1) {
    std::string names;
    for (const auto& l : all) names += (names.empty() ? "" : ", ") + l->info().name;
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + all[0]->info().path + "' is a library of " +
                          std::to_string(all.size()) + " plugins (" + names +
                          "), not one plugin; it is found by plugin name (wicklib_*.so)");
  }
  return all[0];
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

namespace {

// The multi-plugin libraries (wicklib_*.so) of one folder, in name order.
std::vector<fs::path> plugin_lists_in(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& ent : fs::directory_iterator(dir, ec)) {
    const auto f = ent.path().filename().string();
    if (f.rfind(kPluginLibraryPrefix, 0) == 0 && ent.path().extension() == ".so")
      out.push_back(ent.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

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
  // Then the plugins declared by multi-plugin libraries: loaded (once per process) to read
  // their lists, so that one name is never served by two files unnoticed.
  std::shared_ptr<const PluginLibrary> listed;
  std::vector<std::string> skipped;
  bool any_lists = false;
  for (const auto& d : dirs_) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    for (const auto& f : plugin_lists_in(d)) {
      any_lists = true;
      try {
        for (const auto& lib : load_plugin_libraries(f.string()))
          if (lib->info().name == name) {
            hits.push_back(lib->info().path);
            if (!listed) listed = lib;
          }
      } catch (const PluginError& e) {
        skipped.push_back(e.what());
      }
    }
  }
  if (hits.empty()) {
    std::string searched;
    for (const auto& d : dirs_) searched += "\n  " + d;
    if (searched.empty()) searched = "\n  (no folders)";
    std::string also;
    if (any_lists)
      also = std::string(" and in the plugin libraries ") + kPluginLibraryPrefix + "*.so";
    for (const auto& s : skipped) also += "\nskipped: " + s;
    throw PluginError(PluginError::Kind::not_found,
                      "no plugin named '" + name + "' (looked for " + file + " in:" + searched +
                          ")" + also +
                          "\nrun `wick plugins` to list what is installed, or add its folder "
                          "to [plugins] path or WICK_PLUGIN_PATH");
  }
  if (hits.size() > 1)
    throw PluginError(PluginError::Kind::duplicate,
                      "two plugins named '" + name + "': " + hits[0] + " and " + hits[1] +
                          "; remove one, or take its folder out of the plugin path");
  if (listed) return listed;
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
        for (const auto& lib : load_plugin_libraries(f.string())) {
          const auto& n = lib->info().name;
          if (auto it = name_to_path.find(n); it != name_to_path.end()) {
            out.problems.push_back("two plugins named '" + n + "': " + it->second + " and " +
                                   lib->info().path + "; remove one");
            continue;
          }
          name_to_path[n] = lib->info().path;
          out.plugins.push_back(lib);
        }
      } catch (const PluginError& e) {
        out.problems.push_back(e.what());
      }
    }
  }
  return out;
}

}  // namespace wick
