#include "wick/loader.hpp"

#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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

// The info record comes from a library we do not trust yet: its pointers may point nowhere
// and its counts may be wrong. Memory is copied through process_vm_readv on this process,
// which reports an unreadable address (EFAULT) instead of crashing; where the kernel refuses
// the call itself (seccomp), the copy is direct.
bool safe_copy(void* dst, const void* src, std::size_t n) {
  if (n == 0) return true;
  if (!src) return false;
  iovec local{dst, n}, remote{const_cast<void*>(src), n};
  const ssize_t r = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  if (r == static_cast<ssize_t>(n)) return true;
  if (r < 0 && (errno == ENOSYS || errno == EPERM)) {
    std::memcpy(dst, src, n);
    return true;
  }
  return false;
}

// A NUL-terminated string of at most `max` bytes at p; false when p is null, unreadable or the
// string is longer. Read a page at a time, so that no copy crosses into an unmapped page.
bool safe_string(const char* p, std::size_t max, std::string& out) {
  out.clear();
  if (!p) return false;
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  char buf[4096];
  while (out.size() <= max) {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    std::size_t n = std::min<std::size_t>(sizeof buf, page - addr % page);
    if (!safe_copy(buf, p, n)) return false;
    if (const void* z = std::memchr(buf, 0, n)) {
      out.append(buf, static_cast<const char*>(z) - buf);
      return out.size() <= max;
    }
    out.append(buf, n);
    p += n;
  }
  return false;
}

// Why safe_string failed, for a message.
std::string unreadable(const char* p) {
  return p ? "does not point to a readable, NUL-terminated string of sensible length"
           : "is a null pointer";
}

bool identifier(const std::string& s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// Whether a declared default is one TOML value of the declared type (as the config reads it).
bool default_fits(const std::string& literal, ParamType t) {
  toml::table doc;
  try {
    doc = toml::parse("v = " + literal);
  } catch (const toml::parse_error&) {
    return false;
  }
  if (doc.size() != 1 || !doc.get("v")) return false;
  const toml::node& n = *doc.get("v");
  auto all = [&](auto pred) {
    auto* a = n.as_array();
    return a && std::all_of(a->begin(), a->end(), pred);
  };
  auto number = [](const toml::node& e) { return e.is_integer() || e.is_floating_point(); };
  switch (t) {
    case ParamType::boolean:
      return n.is_boolean();
    case ParamType::integer:
      return n.is_integer();
    case ParamType::floating:
      return number(n);
    case ParamType::string:
      return n.is_string();
    case ParamType::int_list:
      return all([](const toml::node& e) { return e.is_integer(); });
    case ParamType::float_list:
      return all(number);
    case ParamType::string_list:
      return all([](const toml::node& e) { return e.is_string(); });
  }
  return false;
}

constexpr std::uint32_t kMaxParams = 1024;
constexpr std::size_t kMaxText = 4096;  // a description, version or help text

// Reads and checks every field of the record before any of it is used; throws PluginError
// (bad_info) naming the library, the plugin when its name is readable, and what is wrong.
PluginInfo read_info(const wick_plugin_info& ci, const std::string& p) {
  PluginInfo info;
  info.path = p;
  info.api_major = ci.api_major;
  info.api_minor = ci.api_minor;
  auto bad = [&](const std::string& what) {
    return PluginError(
        PluginError::Kind::bad_info,
        (info.name.empty() ? std::string("plugin library") : "plugin '" + info.name + "'") + " (" +
            p + ") has a broken info record: " + what +
            "; the plugin must be fixed (declare it with WICK_PLUGIN and "
            "PluginDef) and rebuilt");
  };
  std::string name;
  if (!safe_string(ci.name, 64, name) || !identifier(name))
    throw bad(ci.name && !name.empty() ? "its name is not 1 to 64 letters, digits, '_' or '-'"
                                       : "its name " + unreadable(ci.name));
  info.name = name;
  if (!safe_string(ci.version, kMaxText, info.version))
    throw bad("its version " + unreadable(ci.version));
  if (!safe_string(ci.description, kMaxText, info.description))
    throw bad("its description " + unreadable(ci.description));
  if (ci.kind != static_cast<std::uint32_t>(PluginKind::hook) &&
      ci.kind != static_cast<std::uint32_t>(PluginKind::task))
    throw bad("unknown kind " + std::to_string(ci.kind) + " (0 hook, 1 task)");
  info.kind = static_cast<PluginKind>(ci.kind);
  info.default_order = ci.default_order;
  info.main_process_only = (ci.flags & kMainProcessOnly) != 0;

  if (ci.num_params > kMaxParams)
    throw bad("num_params is " + std::to_string(ci.num_params) + ", more than " +
              std::to_string(kMaxParams));
  std::vector<wick_param_info> params(ci.num_params);
  if (!safe_copy(params.data(), ci.params, params.size() * sizeof(wick_param_info)))
    throw bad("num_params is " + std::to_string(ci.num_params) +
              " but its params array cannot be read that far (or is a null pointer)");
  const std::vector<std::string> reserved =
      info.kind == PluginKind::hook ? std::vector<std::string>{"plugin", "name", "order", "enabled"}
                                    : std::vector<std::string>{"plugin"};
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& cp = params[i];
    const std::string at = "parameter " + std::to_string(i);
    ParamInfo pi;
    if (!safe_string(cp.key, 64, pi.key)) throw bad(at + ": its key " + unreadable(cp.key));
    if (!identifier(pi.key))
      throw bad(at + ": key '" + pi.key.substr(0, 64) +
                "' is not 1 to 64 letters, digits, '_' or '-'");
    const std::string named = at + " ('" + pi.key + "')";
    if (std::find(reserved.begin(), reserved.end(), pi.key) != reserved.end())
      throw bad(named + ": '" + pi.key + "' is reserved for the config's own key");
    for (std::size_t j = 0; j < i; ++j)
      if (info.params[j].key == pi.key) throw bad(named + ": declared twice");
    if (cp.type > static_cast<std::uint32_t>(ParamType::string_list))
      throw bad(named + ": unknown type " + std::to_string(cp.type));
    pi.type = static_cast<ParamType>(cp.type);
    if (cp.default_toml) {
      std::string def;
      if (!safe_string(cp.default_toml, kMaxText, def))
        throw bad(named + ": its default " + unreadable(cp.default_toml));
      if (!default_fits(def, pi.type))
        throw bad(named + ": its default '" + def.substr(0, 60) + "' is not a TOML " +
                  std::string(to_string(pi.type)) + " value");
      pi.default_toml = def;
    }
    if (!safe_string(cp.help, kMaxText, pi.help))
      throw bad(named + ": its help " + unreadable(cp.help));
    info.params.push_back(std::move(pi));
  }
  return info;
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

std::shared_ptr<Hook> PluginLibrary::create_hook(const Params& p) const {
  if (info_.kind != PluginKind::hook)
    throw PluginError(PluginError::Kind::wrong_kind,
                      "plugin '" + info_.name + "' (" + info_.path +
                          ") is a task plugin; use it as [task] plugin = \"" + info_.name + "\"");
  auto* raw = static_cast<Hook*>(handle_->create(p));
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
  auto* raw = static_cast<Task*>(handle_->create(p));
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
  const wick_plugin_info* cp = info_fn();
  wick_plugin_info ci{};
  if (!cp || !safe_copy(&ci, cp, sizeof ci) || ci.magic != WICK_INFO_MAGIC)
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' is not a wick plugin: its 'wick_plugin_info' record has no "
                          "wick signature");
  std::string name;
  if (!safe_string(ci.name, 64, name)) name = "?";
  if (ci.api_major != WICK_API_MAJOR || ci.api_minor > WICK_API_MINOR)
    throw PluginError(
        PluginError::Kind::api_mismatch,
        "wrong SDK API version on plugin '" + name + "' (" + p + "): got version " +
            std::to_string(ci.api_major) + "." + std::to_string(ci.api_minor) +
            ", this wick supports " + std::to_string(WICK_API_MAJOR) + ".0 to " +
            std::to_string(WICK_API_MAJOR) + "." + std::to_string(WICK_API_MINOR) +
            " (same major, minor not newer); " +
            (ci.api_major == WICK_API_MAJOR
                 ? std::string("the plugin needs a newer wick: upgrade wick, or rebuild the "
                               "plugin against this wick's SDK")
                 : std::string("rebuild the plugin against this wick's SDK "
                               "(find_package(wick) and wick_add_plugin)")));
  PluginInfo info = read_info(ci, p);
  if (!handle->lib.has("wick_plugin_create") || !handle->lib.has("wick_plugin_destroy"))
    throw PluginError(PluginError::Kind::missing_factory,
                      "plugin '" + name + "' (" + p +
                          ") has no factory: it does not export "
                          "'wick_plugin_create' and 'wick_plugin_destroy' (declare it with "
                          "WICK_PLUGIN(Class, ...), which "
                          "exports them)");
  handle->create = &handle->lib.get_alias<CreateFn>("wick_plugin_create");
  handle->destroy = &handle->lib.get_alias<DestroyFn>("wick_plugin_destroy");

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
