// Loading a plugin library (Boost.DLL): the checks before it is mapped (permissions, its
// LibTorch build record), its info record(s) read defensively (a foreign or damaged library is
// refused, not trusted), the SDK version rule, and the factories. Finding a plugin by name is
// finder.cpp's.
#include "wick/loader.hpp"

#include <link.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "plugins/elf_file.hpp"
#include "plugins/plugin_name.hpp"
#include "plugins/torch_check.hpp"
#include "wick/build_record.hpp"  // WICK_BUILD_SECTION
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

// Whether `target` lies in the code of the library that holds `anchor` (one of its symbols):
// in one of its code sections (`code`, from its file), or without those in an executable
// segment. An entry point is called, so a data record exported under its name, or a pointer
// to one, would crash the call: it is refused before.
using CodeRanges = std::vector<std::pair<std::uint64_t, std::uint64_t>>;
bool in_code_of(const void* target, const void* anchor, const CodeRanges& code) {
  struct Query {
    std::uintptr_t target, anchor;
    const CodeRanges& code;
    bool found = false, in_code = false;
  } q{reinterpret_cast<std::uintptr_t>(target), reinterpret_cast<std::uintptr_t>(anchor), code};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto& q = *static_cast<Query*>(data);
        auto within = [&](const ElfW(Phdr) & ph, std::uintptr_t a) {
          const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          return ph.p_type == PT_LOAD && a >= start && a - start < ph.p_memsz;
        };
        for (int i = 0; i < info->dlpi_phnum && !q.found; ++i)
          q.found = within(info->dlpi_phdr[i], q.anchor);
        if (!q.found) return 0;
        const std::uint64_t at = q.target - info->dlpi_addr;
        for (const auto& [start, end] : q.code) q.in_code = q.in_code || (at >= start && at < end);
        for (int i = 0; q.code.empty() && i < info->dlpi_phnum && !q.in_code; ++i)
          q.in_code = (info->dlpi_phdr[i].p_flags & PF_X) && within(info->dlpi_phdr[i], q.target);
        return 1;
      },
      &q);
  return q.in_code;
}

// The function a library exports under `name` as WICK_PLUGIN does (a pointer to it, Boost.DLL's
// alias), checked to be code before anything calls it.
void* entry_point(const boost::dll::shared_library& lib, const char* name, const std::string& p,
                  const CodeRanges& code) {
  void* const* alias = &lib.get<void*>(name);
  void* target = nullptr;
  if (!safe_copy(&target, alias, sizeof target) || !in_code_of(target, alias, code))
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p + "' is not a wick plugin: its '" + name +
                          "' is data, not the function pointer wick calls (declare plugins with "
                          "WICK_PLUGIN(Class, ...) or WICK_PLUGINS(...) from <wick/plugin.hpp>)");
  return target;
}

// Why safe_string failed, for a message.
std::string unreadable(const char* p) {
  return p ? "does not point to a readable, NUL-terminated string of sensible length"
           : "is a null pointer";
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
    case ParamType::floating_inf:
      return number(n);
    case ParamType::string:
    case ParamType::choice:
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

std::string how_to_use(const PluginInfo& i) {
  switch (i.kind) {
    case PluginKind::hook:
      return "a hook plugin; enable it under [[hooks]] plugin = \"" + i.name + "\"";
    case PluginKind::task:
      return "a task plugin; use it as [task] plugin = \"" + i.name + "\"";
    case PluginKind::metric:
      return "a metric plugin; enable it under [[metrics]] plugin = \"" + i.name + "\"";
  }
  return "?";
}

template <class T>
std::shared_ptr<T> PluginLibrary::create(PluginKind kind, const Params& p) const {
  if (info_.kind != kind)
    throw PluginError(PluginError::Kind::wrong_kind,
                      "plugin '" + info_.name + "' (" + info_.path + ") is " + how_to_use(info_));
  auto* raw = static_cast<T*>(construct(p));
  if (!raw)
    throw PluginError(PluginError::Kind::missing_factory,
                      "plugin '" + info_.name + "' factory returned nothing");
  // The deleter keeps the library handle alive as long as the object (and libraries are
  // never unloaded anyway).
  auto h = handle_;
  return std::shared_ptr<T>(raw, [h](T* x) { h->destroy(x); });
}

std::shared_ptr<Hook> PluginLibrary::create_hook(const Params& p) const {
  return create<Hook>(PluginKind::hook, p);
}
std::shared_ptr<Task> PluginLibrary::create_task(const Params& p) const {
  return create<Task>(PluginKind::task, p);
}
std::shared_ptr<Metric> PluginLibrary::create_metric(const Params& p) const {
  return create<Metric>(PluginKind::metric, p);
}

namespace {

// Upper bounds that no real plugin reaches: a larger count is a corrupt or hostile record,
// refused before the host walks that many entries.
constexpr std::uint32_t kMaxPluginsPerLibrary = 1024;
constexpr std::uint32_t kMaxParams = 1024;
constexpr std::size_t kMaxText = 4096;  // a version, description, help text or choice

// A record's name for messages, or "?" when it cannot be read.
std::string name_of(const char* p) {
  std::string name;
  return safe_string(p, kMaxPluginName, name) && is_plugin_word(name) ? name : "?";
}

std::string version_message(const std::string& name, const std::string& p, unsigned major,
                            unsigned minor) {
  return "wrong SDK API version on plugin '" + name + "' (" + p + "): got version " +
         std::to_string(major) + "." + std::to_string(minor) + ", this wick supports " +
         std::to_string(WICK_API_MAJOR) + ".0 to " + std::to_string(WICK_API_MAJOR) + "." +
         std::to_string(WICK_API_MINOR) + " (same major, minor not newer); " +
         (major > WICK_API_MAJOR || (major == WICK_API_MAJOR && minor > WICK_API_MINOR)
              ? std::string("the plugin needs a newer wick: upgrade wick, or rebuild the "
                            "plugin against this wick's SDK")
              : std::string("rebuild the plugin against this wick's SDK "
                            "(find_package(wick) and wick_add_plugin)"));
}

bool version_ok(unsigned major, unsigned minor) {
  return major == WICK_API_MAJOR && minor <= WICK_API_MINOR;
}

// Reads one plugin's record (after its signature and version were checked). Every pointer and
// count in it is checked before use: the library is not trusted yet. `where` names the record
// in messages about a malformed one ("" for a single plugin's library).
PluginInfo read_info(const wick_plugin_info& ci, const std::string& p, const std::string& where) {
  PluginInfo info;
  auto malformed = [&](const std::string& what) {
    return PluginError(PluginError::Kind::malformed,
                       "'" + p + "'" + where + ": malformed plugin record: " +
                           (info.name.empty() ? "" : "plugin '" + info.name + "' ") + what +
                           " (a bug in the plugin, or not built with <wick/plugin.hpp>)");
  };
  std::string name;
  if (!safe_string(ci.name, kMaxPluginName, name) || !is_plugin_word(name))
    throw malformed(!ci.name       ? "its name is null"
                    : name.empty() ? "its name " + unreadable(ci.name)
                                   : std::string("its name is not ") + kPluginWordRule);
  info.name = name;
  if (!safe_string(ci.version, kMaxText, info.version))
    throw malformed("its version " + unreadable(ci.version));
  if (!safe_string(ci.description, kMaxText, info.description))
    throw malformed("its description " + unreadable(ci.description));
  if (ci.kind > static_cast<std::uint32_t>(PluginKind::metric))
    throw malformed("has an unknown kind " + std::to_string(ci.kind) +
                    " (0 hook, 1 task, 2 metric)");
  info.kind = static_cast<PluginKind>(ci.kind);
  info.default_order = ci.default_order;
  info.main_process_only = (ci.flags & kMainProcessOnly) != 0;
  info.one_instance = (ci.flags & kOneInstance) != 0;
  info.api_major = ci.api_major;
  info.api_minor = ci.api_minor;
  info.path = p;
  if (ci.num_params > kMaxParams)
    throw malformed("declares " + std::to_string(ci.num_params) + " parameters, more than " +
                    std::to_string(kMaxParams));
  std::vector<wick_param_info> params(ci.num_params);
  if (!safe_copy(params.data(), ci.params, params.size() * sizeof(wick_param_info)))
    throw malformed("declares " + std::to_string(ci.num_params) +
                    " parameters but its table of them cannot be read that far (or is null)");
  const std::vector<std::string> reserved =
      info.kind == PluginKind::hook ? std::vector<std::string>{"plugin", "name", "order", "enabled"}
      : info.kind == PluginKind::metric ? std::vector<std::string>{"plugin", "name", "enabled"}
                                        : std::vector<std::string>{"plugin"};
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& cp = params[i];
    const std::string at = "parameter " + std::to_string(i);
    ParamInfo pi;
    if (!safe_string(cp.key, kMaxPluginName, pi.key))
      throw malformed(at + ": its key " + unreadable(cp.key));
    if (!is_plugin_word(pi.key))
      throw malformed(at + ": key '" + pi.key + "' is not " + kPluginWordRule);
    const std::string named = at + " ('" + pi.key + "')";
    if (std::find(reserved.begin(), reserved.end(), pi.key) != reserved.end())
      throw malformed(named + ": '" + pi.key + "' is reserved for the config's own key");
    for (const auto& earlier : info.params)
      if (earlier.key == pi.key) throw malformed(named + ": declared twice");
    if (cp.type > static_cast<std::uint32_t>(ParamType::floating_inf))  // the last type
      throw malformed(named + ": unknown type " + std::to_string(cp.type));
    pi.type = static_cast<ParamType>(cp.type);
    if (cp.default_toml) {
      std::string def;
      if (!safe_string(cp.default_toml, kMaxText, def))
        throw malformed(named + ": its default " + unreadable(cp.default_toml));
      if (!default_fits(def, pi.type))
        throw malformed(named + ": its default '" + def.substr(0, 60) + "' is not a TOML " +
                        std::string(to_string(pi.type)) + " value");
      pi.default_toml = def;
    }
    if (!safe_string(cp.help, kMaxText, pi.help))
      throw malformed(named + ": its help " + unreadable(cp.help));
    if (pi.type == ParamType::choice) {
      if (cp.num_choices == 0 || cp.num_choices > kMaxParams)
        throw malformed(named + ": a choice parameter with " + std::to_string(cp.num_choices) +
                        " choices (1 to " + std::to_string(kMaxParams) +
                        " expected; declare it with param_choice)");
      std::vector<const char*> choices(cp.num_choices);
      if (!safe_copy(choices.data(), cp.choices, choices.size() * sizeof(const char*)))
        throw malformed(named + ": its table of choices cannot be read (or is null)");
      std::string listed;
      for (std::size_t c = 0; c < choices.size(); ++c) {
        std::string v;
        if (!safe_string(choices[c], kMaxText, v))
          throw malformed(named + ": choice " + std::to_string(c) + " " + unreadable(choices[c]));
        listed += (c ? ", \"" : "\"") + v + "\"";
        pi.choices.push_back(std::move(v));
      }
      // The default is a TOML basic string, as PluginDef writes it: "..." with \" and \\ escaped.
      if (pi.default_toml &&
          std::none_of(pi.choices.begin(), pi.choices.end(), [&](const std::string& c) {
            std::string quoted = "\"";
            for (char ch : c)
              quoted += ch == '"' || ch == '\\' ? std::string("\\") + ch : std::string(1, ch);
            return *pi.default_toml == quoted + "\"";
          }))
        throw malformed(named + ": its default " + *pi.default_toml +
                        " is not one of its choices " + listed + " (fix its param_choice)");
    }
    info.params.push_back(std::move(pi));
  }
  return info;
}

// The plugins of a WICK_PLUGINS library. The list header is checked (signature, version,
// count) before any entry is read, and every entry before any is returned.
std::vector<std::shared_ptr<const PluginLibrary>> read_list(
    const std::shared_ptr<boost::dll::shared_library>& lib, const std::string& p,
    const std::string& torch_build, const CodeRanges& code) {
  auto malformed = [&](const std::string& what) {
    return PluginError(PluginError::Kind::malformed,
                       "'" + p + "': malformed plugin list: " + what +
                           " (a bug in the library, or not built with WICK_PLUGINS from "
                           "<wick/plugin.hpp>)");
  };
  // Copied before use, as the records are (see read_info).
  const wick_plugin_list* lp =
      reinterpret_cast<ListFn*>(entry_point(*lib, "wick_plugin_list", p, code))();
  const void* anchor = &lib->get<void*>("wick_plugin_list");  // a symbol of the library
  wick_plugin_list list{};
  const wick_plugin_list* cl = &list;
  if (!lp || !safe_copy(&list, lp, sizeof list) || list.magic != WICK_LIST_MAGIC)
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
  std::vector<wick_plugin_entry> entries(cl->count);
  if (!safe_copy(entries.data(), cl->entries, entries.size() * sizeof(wick_plugin_entry)))
    throw malformed("it declares " + std::to_string(cl->count) +
                    " plugins but its table of entries cannot be read that far");
  std::vector<std::shared_ptr<const PluginLibrary>> out;
  std::set<std::string> names;
  for (std::uint32_t i = 0; i < cl->count; ++i) {
    const auto& e = entries[i];
    const std::string where = " (entry " + std::to_string(i) + ")";
    wick_plugin_info ci{};
    if (!e.info) throw malformed("entry " + std::to_string(i) + " has no record");
    if (!safe_copy(&ci, e.info, sizeof ci) || ci.magic != WICK_INFO_MAGIC)
      throw malformed("entry " + std::to_string(i) + "'s record has no wick signature");
    if (!version_ok(ci.api_major, ci.api_minor))
      throw PluginError(PluginError::Kind::api_mismatch,
                        version_message(name_of(ci.name), p, ci.api_major, ci.api_minor));
    PluginInfo info = read_info(ci, p, where);
    if (!e.create || !e.destroy)
      throw PluginError(PluginError::Kind::missing_factory,
                        "plugin '" + info.name + "' (" + p +
                            ") has no factory in its library's list (declare it with "
                            "WICK_ENTRY(Class, ...))");
    if (!in_code_of(reinterpret_cast<const void*>(e.create), anchor, code) ||
        !in_code_of(reinterpret_cast<const void*>(e.destroy), anchor, code))
      throw malformed("entry " + std::to_string(i) + "'s factory is not code of the library");
    if (!names.insert(info.name).second)
      throw PluginError(PluginError::Kind::duplicate,
                        "'" + p + "' declares plugin '" + info.name + "' twice; remove one");
    info.in_library = true;
    info.library_size = cl->count;
    info.torch_build = torch_build;
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
  // Found before dlopen maps it: a cut-short file faults there (SIGBUS).
  if (const auto cut = elf_cut_short(p); !cut.empty())
    throw PluginError(PluginError::Kind::load_failed, "cannot load '" + p + "': " + cut);
  const auto facts = read_elf_facts(p, WICK_BUILD_SECTION);  // the file, read once
  const std::string torch_build = check_torch_build(p, facts);
  const CodeRanges code = facts ? facts->code : CodeRanges{};

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
    auto plugins = read_list(lib, p, torch_build, code);
    L.by_path.emplace(p, plugins);
    return plugins;
  }
  if (!single)
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' is not a wick plugin: it exports no 'wick_plugin_info' "
                          "(a plugin declares itself with WICK_PLUGIN(Class, ...) from "
                          "<wick/plugin.hpp>)");
  const wick_plugin_info* cp =
      reinterpret_cast<InfoFn*>(entry_point(*lib, "wick_plugin_info", p, code))();
  wick_plugin_info ci{};
  if (!cp || !safe_copy(&ci, cp, sizeof ci) || ci.magic != WICK_INFO_MAGIC)
    throw PluginError(PluginError::Kind::not_a_plugin,
                      "'" + p +
                          "' is not a wick plugin: its 'wick_plugin_info' record has no "
                          "wick signature");
  const std::string name = name_of(ci.name);
  if (!version_ok(ci.api_major, ci.api_minor))
    throw PluginError(PluginError::Kind::api_mismatch,
                      version_message(name, p, ci.api_major, ci.api_minor));
  if (!lib->has("wick_plugin_create") || !lib->has("wick_plugin_destroy"))
    throw PluginError(PluginError::Kind::missing_factory,
                      "plugin '" + name + "' (" + p +
                          ") has no factory: it does not export "
                          "'wick_plugin_create' and 'wick_plugin_destroy' (declare it with "
                          "WICK_PLUGIN(Class, ...), which "
                          "exports them)");
  PluginInfo info = read_info(ci, p, "");
  info.torch_build = torch_build;
  auto handle = std::make_shared<PluginLibrary::Handle>();
  handle->lib = lib;
  handle->create = reinterpret_cast<CreateFn*>(entry_point(*lib, "wick_plugin_create", p, code));
  handle->destroy = reinterpret_cast<DestroyFn*>(entry_point(*lib, "wick_plugin_destroy", p, code));
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

}  // namespace wick
