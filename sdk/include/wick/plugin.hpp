// Declaring and exporting a plugin. One macro, WICK_PLUGIN(Class, definition), exports
// through Boost.DLL a plain C info record (read and version-checked by the host before any
// C++ object crosses the boundary) and a factory that builds Class from validated Params.
//
//   WICK_PLUGIN(MyHook, wick::PluginDef("my_hook", "1.0.0", "What it does in one line")
//                           .order(5)
//                           .param_float("scale", 1.0, "what scale means"))
//
// Several plugins in one library (a task and the hooks that belong with it), since SDK 2.0:
// WICK_PLUGINS exports a plain C list of the same records, each with its factory, and the
// library is named wicklib_NAME.so (wick_add_plugin_library) so that wick can find it.
//
//   WICK_PLUGINS(WICK_ENTRY(MyTask, wick::PluginDef("my_task", "1.0.0", "...")),
//                WICK_ENTRY(MyHook, wick::PluginDef("my_task_probe", "1.0.0", "...")))
#pragma once

#include <boost/dll/alias.hpp>
#include <cstdint>
#include <cstdio>  // kept for plugins that relied on it (SDK 2.23 and older)
#include <string>
#include <type_traits>
#include <vector>

#include "wick/build_record.hpp"
#include "wick/files.hpp"  // toml_float
#include "wick/hook.hpp"
#include "wick/params.hpp"
#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

extern "C" {
// Plain data only: the host reads these fields before trusting anything else in the library.
struct wick_param_info {
  const char* key;
  std::uint32_t type;        // wick::ParamType
  const char* default_toml;  // TOML literal of the default, or nullptr when required
  const char* help;
  const char* const* choices;  // type choice: the allowed values (plain strings); else nullptr
  std::uint32_t num_choices;   // type choice: how many; else 0
};
struct wick_plugin_info {
  std::uint32_t magic;  // WICK_INFO_MAGIC
  std::uint16_t api_major;
  std::uint16_t api_minor;
  const char* name;
  const char* version;
  std::uint32_t kind;  // 0 hook, 1 task, 2 metric (SDK 2.1)
  const char* description;
  std::int32_t default_order;
  std::uint32_t flags;  // bit 0: main process only
  const wick_param_info* params;
  std::uint32_t num_params;
};
}

namespace wick {
class Params;
}

extern "C" {
// One plugin of a multi-plugin library: its record and its factory pair.
struct wick_plugin_entry {
  const wick_plugin_info* info;
  void* (*create)(const wick::Params&);
  void (*destroy)(void*);
};
// What WICK_PLUGINS exports: checked (signature, version, a sane count) before any entry is
// read, and every entry's record is then checked as a single plugin's is.
struct wick_plugin_list {
  std::uint32_t magic;  // WICK_LIST_MAGIC
  std::uint16_t api_major;
  std::uint16_t api_minor;
  std::uint32_t count;
  const wick_plugin_entry* entries;
};
}

namespace wick {

class Task;
class Metric;
enum class PluginKind : std::uint32_t { hook = 0, task = 1, metric = 2 };
inline constexpr std::uint32_t kMainProcessOnly = 1u;
inline constexpr std::uint32_t kOneInstance = 2u;  // since SDK 2.21

// Builder for a plugin's info record; lives in the plugin's static storage.
class PluginDef {
 public:
  PluginDef(std::string name, std::string version, std::string description)
      : name_(std::move(name)),
        version_(std::move(version)),
        description_(std::move(description)) {}

  // Default position among hooks (lower first); a config may override it per instance.
  PluginDef& order(int o) {
    order_ = o;
    return *this;
  }
  // Run on the main process (rank 0) only, in data-parallel runs.
  PluginDef& main_process_only() {
    flags_ |= kMainProcessOnly;
    return *this;
  }
  // At most one instance in a config (since SDK 2.21): for a hook whose second instance would
  // redo its work on the same step (a second gradient accumulation divides the loss again).
  // A config with two is refused, naming both tables.
  PluginDef& one_instance() {
    flags_ |= kOneInstance;
    return *this;
  }

  PluginDef& param_bool(std::string key, bool def, std::string help) {
    return add(std::move(key), ParamType::boolean, def ? "true" : "false", std::move(help));
  }
  PluginDef& param_int(std::string key, std::int64_t def, std::string help) {
    return add(std::move(key), ParamType::integer, std::to_string(def), std::move(help));
  }
  PluginDef& param_float(std::string key, double def, std::string help) {
    return add(std::move(key), ParamType::floating, float_literal(def), std::move(help));
  }
  // Since SDK 2.9: a float parameter that also takes inf and -inf (`norm_type = inf`).
  PluginDef& param_float_inf(std::string key, double def, std::string help) {
    return add(std::move(key), ParamType::floating_inf, float_literal(def), std::move(help));
  }
  PluginDef& param_string(std::string key, std::string def, std::string help) {
    return add(std::move(key), ParamType::string, quote(def), std::move(help));
  }
  PluginDef& param_int_list(std::string key, const std::vector<std::int64_t>& def,
                            std::string help) {
    std::string s = "[";
    for (std::size_t i = 0; i < def.size(); ++i) s += (i ? ", " : "") + std::to_string(def[i]);
    return add(std::move(key), ParamType::int_list, s + "]", std::move(help));
  }
  PluginDef& param_float_list(std::string key, const std::vector<double>& def, std::string help) {
    std::string s = "[";
    for (std::size_t i = 0; i < def.size(); ++i) s += (i ? ", " : "") + float_literal(def[i]);
    return add(std::move(key), ParamType::float_list, s + "]", std::move(help));
  }
  PluginDef& param_string_list(std::string key, const std::vector<std::string>& def,
                               std::string help) {
    std::string s = "[";
    for (std::size_t i = 0; i < def.size(); ++i) s += (i ? ", " : "") + quote(def[i]);
    return add(std::move(key), ParamType::string_list, s + "]", std::move(help));
  }
  // A string restricted to a fixed set: param_choice("mode", {"fast", "exact"}, "fast", ...).
  // The config's value must be one of `choices` (checked by wick, with a suggestion for a near
  // miss); read it with get_string. The default must be one of them too.
  PluginDef& param_choice(std::string key, std::vector<std::string> choices, std::string def,
                          std::string help) {
    params_.push_back(
        {std::move(key), ParamType::choice, quote(def), true, std::move(help), std::move(choices)});
    return *this;
  }
  // A key the config must set; it has no default.
  PluginDef& param_required(std::string key, ParamType type, std::string help) {
    params_.push_back({std::move(key), type, std::string(), false, std::move(help), {}});
    return *this;
  }

  const wick_plugin_info* info(PluginKind kind) {
    c_params_.clear();
    c_choices_.assign(params_.size(), {});
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      for (const auto& c : p.choices) c_choices_[i].push_back(c.c_str());
      c_params_.push_back({p.key.c_str(), static_cast<std::uint32_t>(p.type),
                           p.has_default ? p.def.c_str() : nullptr, p.help.c_str(),
                           c_choices_[i].empty() ? nullptr : c_choices_[i].data(),
                           static_cast<std::uint32_t>(c_choices_[i].size())});
    }
    info_ = {WICK_INFO_MAGIC,
             WICK_API_MAJOR,
             WICK_API_MINOR,
             name_.c_str(),
             version_.c_str(),
             static_cast<std::uint32_t>(kind),
             description_.c_str(),
             order_,
             flags_,
             c_params_.data(),
             static_cast<std::uint32_t>(c_params_.size())};
    return &info_;
  }

 private:
  struct Param {
    std::string key;
    ParamType type;
    std::string def;
    bool has_default;
    std::string help;
    std::vector<std::string> choices;  // type choice only
  };
  PluginDef& add(std::string key, ParamType type, std::string def, std::string help) {
    params_.push_back({std::move(key), type, std::move(def), true, std::move(help), {}});
    return *this;
  }
  static std::string quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  }
  static std::string float_literal(double v);

  std::string name_, version_, description_;
  int order_ = 0;
  std::uint32_t flags_ = 0;
  std::vector<Param> params_;
  std::vector<wick_param_info> c_params_;
  std::vector<std::vector<const char*>> c_choices_;  // per parameter, into params_[i].choices
  wick_plugin_info info_{};
};

namespace detail {
template <class T>
constexpr PluginKind kind_of() {
  static_assert(
      std::is_base_of_v<Hook, T> || std::is_base_of_v<Task, T> || std::is_base_of_v<Metric, T>,
      "WICK_PLUGIN: the class must derive from wick::Hook, wick::Task or wick::Metric");
  if constexpr (std::is_base_of_v<Hook, T>)
    return PluginKind::hook;
  else if constexpr (std::is_base_of_v<Task, T>)
    return PluginKind::task;
  else
    return PluginKind::metric;
}
// The object as the host receives it: a pointer to its plugin kind's base class.
template <class T>
using base_of = std::conditional_t<std::is_base_of_v<Hook, T>, Hook,
                                   std::conditional_t<std::is_base_of_v<Task, T>, Task, Metric>>;
template <class T>
void* create(const Params& p) {
  // An abstract class is not constructible either: say which mistake it is (since SDK 2.9).
  // The compiler's notes on the `new` below then name the functions still pure.
  static_assert(!std::is_abstract_v<T> || !std::is_base_of_v<Task, T>,
                "WICK_PLUGIN: the class is abstract: it does not override every pure virtual "
                "function of wick::Task. A task must override model(), train_data(), "
                "forward(Context&, const Batch&) and loss(Context&, const at::Tensor&, const "
                "Batch&), with exactly these signatures (mark them override)");
  static_assert(!std::is_abstract_v<T> || !std::is_base_of_v<Metric, T>,
                "WICK_PLUGIN: the class is abstract: it does not override every pure virtual "
                "function of wick::Metric. A metric must override update(const at::Tensor&, "
                "const at::Tensor&), compute() const and state(), with exactly these "
                "signatures (mark them override)");
  static_assert(!std::is_abstract_v<T> || !std::is_base_of_v<Hook, T>,
                "WICK_PLUGIN: the class is abstract: it does not override every pure virtual "
                "function of wick::Hook. A hook must override connect(wick::Registrar&), with "
                "exactly this signature (mark it override)");
  static_assert(std::is_abstract_v<T> || std::is_constructible_v<T, const Params&>,
                "WICK_PLUGIN: the class needs a constructor taking const wick::Params&");
  return static_cast<base_of<T>*>(new T(p));
}
// Objects are deleted by the code that made them (same allocator, same library).
template <class T>
void destroy(void* p) {
  delete static_cast<base_of<T>*>(p);
}
}  // namespace detail

using InfoFn = const wick_plugin_info*();
using ListFn = const wick_plugin_list*();
using CreateFn = void*(const Params&);
using DestroyFn = void(void*);

}  // namespace wick

// The three exported names the host looks up (Boost.DLL aliases, see boost/dll/alias.hpp), and
// the LibTorch build record it reads from the file first (wick/build_record.hpp).
#define WICK_PLUGIN(Class, definition)                                                \
  namespace {                                                                         \
  const wick_plugin_info* wick_info_impl_() {                                         \
    static ::wick::PluginDef def = (definition);                                      \
    static const wick_plugin_info* info = def.info(::wick::detail::kind_of<Class>()); \
    return info;                                                                      \
  }                                                                                   \
  void* wick_create_impl_(const ::wick::Params& p) {                                  \
    return ::wick::detail::create<Class>(p);                                          \
  }                                                                                   \
  void wick_destroy_impl_(void* p) {                                                  \
    ::wick::detail::destroy<Class>(p);                                                \
  }                                                                                   \
  }                                                                                   \
  BOOST_DLL_ALIAS(wick_info_impl_, wick_plugin_info)                                  \
  BOOST_DLL_ALIAS(wick_create_impl_, wick_plugin_create)                              \
  BOOST_DLL_ALIAS(wick_destroy_impl_, wick_plugin_destroy)                            \
  WICK_EMIT_BUILD_RECORD

namespace wick::detail {
// One WICK_ENTRY: F is a lambda type unique to the entry, so each gets its own static def.
template <class T, class F>
wick_plugin_entry entry(F make_def) {
  static ::wick::PluginDef def = make_def();
  return {def.info(kind_of<T>()), &create<T>, &destroy<T>};
}
}  // namespace wick::detail

// One plugin of a WICK_PLUGINS list.
#define WICK_ENTRY(Class, definition) \
  ::wick::detail::entry<Class>([]() -> ::wick::PluginDef { return (definition); })

// The library's plugin list (one exported name, wick_plugin_list). The entries are built on
// the host's first call, after the library is loaded, as WICK_PLUGIN's record is.
#define WICK_PLUGINS(...)                                                                  \
  namespace {                                                                              \
  const wick_plugin_list* wick_list_impl_() {                                              \
    static const wick_plugin_entry entries[] = {__VA_ARGS__};                              \
    static const wick_plugin_list list = {WICK_LIST_MAGIC, WICK_API_MAJOR, WICK_API_MINOR, \
                                          sizeof entries / sizeof entries[0], entries};    \
    return &list;                                                                          \
  }                                                                                        \
  }                                                                                        \
  BOOST_DLL_ALIAS(wick_list_impl_, wick_plugin_list)                                       \
  WICK_EMIT_BUILD_RECORD

// Inline so that describing a plugin needs nothing from libwick. %.15g round-trips the
// decimal literals people write (0.001, 1e-8); TOML wants a '.' or exponent in a float.
inline std::string wick::PluginDef::float_literal(double v) {
  return wick::toml_float(v, 15);
}

WICK_PUBLIC_END
