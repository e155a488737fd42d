// Loading a config: the file read (bounded) and parsed, --set overrides applied, the built-in
// tables ([trainer], [optimizer] / [optimizers.*], [plugins]) and the plugin instances
// ([task], [[hooks]], [[metrics]]) validated, every error naming its file:line:col or --set.
// About 500 lines: the built-in tables' cross-key checks read best in one place
// (validate_builtin); typed values, the [trainer] options (trainer_options.cpp) and optimizer
// tables have files of their own.
#include "wick/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "config/config_impl.hpp"
#include "config/schemas.hpp"
#include "config/toml_depth.hpp"
#include "config/toml_text.hpp"
#include "config/trainer_options.hpp"
#include "cuda/cuda_load.hpp"
#include "plugins/plugin_name.hpp"
#include "system/error_text.hpp"
#include "wick/cluster.hpp"

namespace wick {

std::optional<Device> parse_device(const std::string& s) {
  if (s == "cpu") return Device{};
  if (s == "cuda") return Device{DeviceType::cuda, -1};
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 8 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos)
    return Device{DeviceType::cuda, std::stoi(s.substr(5))};
  return std::nullopt;
}

namespace fs = std::filesystem;

// The largest config file read (a config is a few KiB; anything near this is not one).
constexpr std::size_t kMaxConfigBytes = std::size_t{4} << 20;

namespace {

const std::vector<std::string> kTopLevel = {"trainer", "task",    "optimizer", "optimizers",
                                            "hooks",   "metrics", "plugins"};
const std::vector<std::string> kHookReserved = {"plugin", "name", "order", "enabled"};
const std::vector<std::string> kTaskReserved = {"plugin"};
const std::vector<std::string> kMetricReserved = {"plugin", "name", "enabled"};

// The nesting toml++ would recurse into (config/toml_depth.hpp), refused before it parses.
std::string too_deep_message() {
  return "nests deeper than " + std::to_string(kMaxTomlDepth) +
         " levels (dotted key parts, table header parts, inline tables and arrays); write it "
         "flatter";
}

// An instance's name is how `--set hooks.NAME.KEY` addresses it and how a metric names its
// files in the run folder (NAME.csv): a plain word.
bool plain_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

}  // namespace

Config::Config() : impl_(std::make_unique<Impl>()) {}
Config::Config(Config&&) noexcept = default;
Config& Config::operator=(Config&&) noexcept = default;
Config::~Config() = default;

void Config::Impl::apply_set(const std::string& set) {
  const std::string label = "--set " + set;
  auto eq = set.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(label + ": expected SECTION.KEY=VALUE, e.g. --set trainer.epochs=1");
  const std::string lhs = set.substr(0, eq), value = set.substr(eq + 1);
  std::vector<std::string> parts;
  for (std::size_t s = 0;;) {
    auto dot = lhs.find('.', s);
    parts.push_back(lhs.substr(s, dot == std::string::npos ? std::string::npos : dot - s));
    if (dot == std::string::npos) break;
    s = dot + 1;
  }
  toml::table* target = nullptr;
  std::string key;
  if (parts.size() == 3 && parts[0] == "optimizers") {
    auto* all = root.get("optimizers") ? root.get("optimizers")->as_table() : nullptr;
    target = all && all->get(parts[1]) ? all->get(parts[1])->as_table() : nullptr;
    if (!target) throw ConfigError(label + ": no [optimizers." + parts[1] + "] table in " + path);
    key = parts[2];
  } else if (parts.size() == 2 && parts[0] != "hooks" && parts[0] != "metrics") {
    if (std::find(kTopLevel.begin(), kTopLevel.end(), parts[0]) == kTopLevel.end()) {
      std::string msg = label + ": unknown section '" + parts[0] + "'";
      if (auto s = did_you_mean(parts[0], kTopLevel); !s.empty())
        msg += "; did you mean '" + s + "'?";
      throw ConfigError(msg);
    }
    if (!root.contains(parts[0])) root.insert(parts[0], toml::table{});
    target = root.get(parts[0])->as_table();
    if (!target) throw ConfigError(label + ": '" + parts[0] + "' is not a table in " + path);
    key = parts[1];
  } else if (parts.size() == 3 && (parts[0] == "hooks" || parts[0] == "metrics")) {
    auto* arr = root.get(parts[0]) ? root.get(parts[0])->as_array() : nullptr;
    std::string names;
    if (arr)
      for (auto& n : *arr) {
        auto* t = n.as_table();
        if (!t) continue;
        std::string inst = (*t)["name"].value_or((*t)["plugin"].value_or(std::string()));
        names += " " + inst;
        if (inst == parts[1]) target = t;
      }
    if (!target)
      throw ConfigError(label + ": no [[" + parts[0] + "]] instance named '" + parts[1] + "' in " +
                        path + (names.empty() ? "" : " (instances:" + names + ")"));
    key = parts[2];
  } else {
    throw ConfigError(label +
                      ": expected SECTION.KEY=VALUE, hooks.INSTANCE.KEY=VALUE or "
                      "optimizers.NAME.KEY=VALUE");
  }
  toml::table parsed;
  if (toml_too_deep("v = " + value)) throw ConfigError(label + ": the value " + too_deep_message());
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error& e) {
    // What reads as one number is not text: a value past float64 (1e309) or int64 says so.
    static const std::regex number(R"([+-]?[0-9][0-9_]*(\.[0-9][0-9_]*)?([eE][+-]?[0-9]+)?)");
    const bool numeric = std::regex_match(value, number);
    if (numeric)
      throw ConfigError(label + ": '" + printable(value) + "' is not a number TOML can hold (" +
                        std::string(e.description()) + ")");
    parsed.insert("v", value);  // not a TOML literal: take it as a string
  }
  if (parsed.size() != 1)  // "0.1\nname = 'sgd'": the rest would be dropped silently
    throw ConfigError(label + ": the value '" + printable(value) +
                      "' holds more than one TOML value; give one value (quote text as a "
                      "string)");
  target->insert_or_assign(key, std::move(*parsed.get("v")));
  overrides[target->get(key)] = {label, value};
}

void Config::Impl::validate_builtin() {
  for (auto&& [k, v] : root) {
    const std::string key(k.str());
    if (std::find(kTopLevel.begin(), kTopLevel.end(), key) != kTopLevel.end()) continue;
    std::string msg = "unknown top-level key '" + key + "'";
    if (auto s = did_you_mean(key, kTopLevel); !s.empty())
      msg += "; did you mean '" + s + "'?";
    else
      msg +=
          "; a config has [trainer], [task], [optimizer] or [optimizers.NAME], [[hooks]], "
          "[[metrics]] and [plugins]";
    throw error(where(k.source()), msg);
  }
  auto section_table = [&](const std::string& name) -> const toml::table* {
    auto* n = root.get(name);
    if (!n) return nullptr;
    auto* t = n->as_table();
    if (!t) throw error(where(*n), "'" + name + "' must be a table: [" + name + "]");
    return t;
  };

  static const toml::table empty;
  const toml::table* tt = section_table("trainer");
  // batch_size and threads are integers that take one string, "auto": validated as an integer,
  // chosen later (batch_size by make_trainer(), threads by the Trainer), and put back
  // afterwards, so that toml() keeps "auto". threads is "auto" when not set, too.
  auto take_auto = [&](const char* key, const char* what, std::int64_t stand_in, bool absent_auto) {
    const toml::node* n = tt ? tt->get(key) : nullptr;
    if (n && !n->is_string()) return false;
    if (!n && !absent_auto) return false;
    if (n && n->value_or(std::string()) != "auto")
      throw error(where(*n), std::string("trainer.") + key + " must be an integer or \"auto\" (" +
                                 what + "), not " + toml_text(*n));
    if (!tt) {  // no [trainer]: one for the stand-in, erased below
      root.insert("trainer", toml::table{});
      tt = root.get("trainer")->as_table();
    }
    root.get("trainer")->as_table()->insert_or_assign(key, stand_in);
    return true;
  };
  trainer.auto_batch_size =
      take_auto("batch_size", "the fastest power of two on the CPU, the largest that fits on CUDA",
                32, false);
  const bool threads_given = tt && tt->get("threads");
  trainer.auto_threads = take_auto(
      "threads", "the cores free at the start, shared among this machine's ranks", 0, true);
  Params tp = validate(tt ? *tt : empty, trainer_schema(), "[trainer]", {}, "trainer", "trainer");
  // Values wrong on their face are refused here, so that `wick check` finds them and `wick fit`
  // stops before any data is loaded.
  const std::string trainer_where = where(tt ? tt->source() : toml::source_region{});
  for (const auto& option : trainer_options()) {
    const std::string must = option.read(tp, trainer);
    check(tp, option.info.key.c_str(), must.empty(), must, "[trainer]", trainer_where);
  }
  // "auto" resolved once, as the Trainer resolves it, before any plugin is made. A run that
  // asks for CUDA loads LibTorch's CUDA side now, before anything asks LibTorch whether it has
  // CUDA (its first answer stays); an explicit CUDA device is checked when the run starts
  // (`wick check` of a CUDA config passes on a machine without a GPU).
  device = trainer.auto_device ? resolve_device(trainer.device, true) : trainer.device;
  if (trainer.device.is_cuda() && cuda::compiled()) (void)cuda::load();
  if (trainer.auto_batch_size)
    root.get("trainer")->as_table()->insert_or_assign("batch_size", "auto");
  if (trainer.auto_threads && threads_given)
    root.get("trainer")->as_table()->insert_or_assign("threads", "auto");
  else if (trainer.auto_threads)
    root.get("trainer")->as_table()->erase("threads");
  // More loader threads than cores only adds switching; allowed, as the user may know better.
  if (const auto cores = static_cast<std::int64_t>(std::thread::hardware_concurrency());
      cores > 0 && trainer.num_workers > cores) {
    const auto& e = tp.impl().entries.at("num_workers");
    std::fprintf(stderr,
                 "wick: warning: %s: 'num_workers' in [trainer] is %lld, more than this "
                 "machine's %lld cores\n",
                 (e.where.empty() ? path : e.where).c_str(),
                 static_cast<long long>(trainer.num_workers), static_cast<long long>(cores));
  }

  if (root.get("trainer")->as_table()->empty()) root.erase("trainer");  // only the stand-in's

  // [optimizer] (one optimizer over the model) or [optimizers.NAME] (one per named module).
  const toml::table* ot = section_table("optimizer");
  const toml::table* all = section_table("optimizers");
  if (ot && all)
    throw error(where(all->source()),
                "[optimizers.NAME] tables and an [optimizer] table together; use [optimizer] "
                "for one optimizer over the model, or one [optimizers.NAME] per module");
  has_optimizer = ot != nullptr || all != nullptr;
  optimizers.clear();
  optimizers.push_back(read_optimizer(ot, "[optimizer]", ""));
  if (all) {
    optimizers.clear();
    // In the order the file gives them (toml++ keeps a table's keys sorted by name).
    std::vector<std::pair<std::string, const toml::node*>> named;
    for (auto&& [k, v] : *all) named.emplace_back(std::string(k.str()), &v);
    std::stable_sort(named.begin(), named.end(), [](const auto& a, const auto& b) {
      const auto &x = a.second->source().begin, &y = b.second->source().begin;
      return x.line != y.line ? x.line < y.line : x.column < y.column;
    });
    for (const auto& [name, v] : named) {
      const auto* t = v->as_table();
      if (!t)
        throw error(where(*v), "[optimizers." + name + "] must be a table: [optimizers." + name +
                                   "] with name = \"adam\", lr = ...");
      optimizers.push_back(read_optimizer(t, "[optimizers." + name + "]", name));
    }
    if (optimizers.empty())
      throw error(where(all->source()), "[optimizers] names no optimizer; add [optimizers.NAME]");
  }

  if (const toml::table* pt = section_table("plugins")) {
    for (auto&& [k, v] : *pt) {
      const std::string key(k.str());
      if (key == "data_parallel" || key == "profiler") {
        const auto* name = v.as_string();
        if (!name || !is_plugin_word(name->get()))
          throw error(where(v), "'" + key + "' in [plugins] must be a plugin's name (a string: " +
                                    kPluginWordRule + ")");
        (key == "profiler" ? profiler_plugin : data_parallel_plugin) = name->get();
        continue;
      }
      if (key != "path") {
        std::string msg = "unknown key '" + key + "' in [plugins]";
        if (auto s = did_you_mean(key, {"path", "data_parallel", "profiler"}); !s.empty())
          msg += "; did you mean '" + s + "'?";
        else
          msg += "; known keys: path data_parallel profiler";
        throw error(where(k.source()), msg);
      }
      std::vector<std::string> dirs;
      if (v.is_string())
        dirs.push_back(*v.value<std::string>());
      else if (auto* a = v.as_array()) {
        for (auto& e : *a) {
          if (!e.is_string())
            throw error(where(e), "'path' in [plugins] must be a string or an array of strings");
          dirs.push_back(*e.value<std::string>());
        }
      } else {
        throw error(where(v), "'path' in [plugins] must be a string or an array of strings");
      }
      for (auto& d : dirs) {
        fs::path p(d);
        if (p.is_relative()) p = fs::path(path).parent_path() / p;
        plugin_dirs.push_back(p.lexically_normal().string());
      }
    }
  }

  if (const toml::table* t = section_table("task")) {
    auto* pn = t->get("plugin");
    if (!pn)
      throw error(where(t->source()),
                  "missing required key 'plugin' in [task] (the task "
                  "plugin's name, e.g. plugin = \"synthetic\")");
    if (!pn->is_string())
      throw error(where(*pn),
                  "'plugin' in [task] must be a string, not " + std::string(node_type_name(*pn)));
    task_plugin = *pn->value<std::string>();
    if (task_plugin.empty())
      throw error(where(*pn),
                  "'plugin' in [task] is empty; name the task plugin, e.g. "
                  "plugin = \"synthetic\"");
    if (!is_plugin_word(task_plugin))
      throw error(where(*pn), "'plugin' in [task] is '" + printable(task_plugin) +
                                  "'; a plugin's name is " + kPluginWordRule);
  }

  validate_instances("hooks", /*ordered=*/true);
  validate_instances("metrics", /*ordered=*/false);
}

// [[hooks]] and [[metrics]]: arrays of plugin instances, each named uniquely.
void Config::Impl::validate_instances(const std::string& array, bool ordered) {
  auto* hn = root.get(array);
  if (!hn) return;
  auto* arr = hn->as_array();
  if (!arr || !arr->is_array_of_tables())
    throw error(where(*hn),
                "'" + array + "' must be an array of tables: write each as [[" + array + "]]");
  std::map<std::string, std::string> seen;
  for (auto& n : *arr) {
    const auto& t = *n.as_table();
    auto* pn = t.get("plugin");
    if (!pn) throw error(where(t.source()), "missing required key 'plugin' in [[" + array + "]]");
    if (!pn->is_string())
      throw error(where(*pn), "'plugin' in [[" + array + "]] must be a string, not " +
                                  std::string(node_type_name(*pn)));
    std::string inst = *pn->value<std::string>();
    if (inst.empty())
      throw error(where(*pn), "'plugin' in [[" + array + "]] is empty; name the plugin");
    if (!is_plugin_word(inst))
      throw error(where(*pn), "'plugin' in [[" + array + "]] is '" + printable(inst) +
                                  "'; a plugin's name is " + kPluginWordRule);
    if (auto* nn = t.get("name")) {
      if (!nn->is_string()) throw error(where(*nn), "'name' in [[" + array + "]] must be a string");
      inst = *nn->value<std::string>();
      if (!plain_name(inst))
        throw error(where(*nn), "'name' in [[" + array + "]] is '" + printable(inst) +
                                    "'; an instance name is letters, digits, '_' and '-' (it "
                                    "is what --set " +
                                    array + ".NAME.KEY takes, and what a metric names its files)");
    }
    const std::string section = "[" + array + "." + inst + "]";
    if (auto* on = t.get("order"); ordered && on && !on->is_integer())
      throw error(where(*on),
                  "'order' in " + section + " must be an integer, not " + node_type_name(*on));
    if (auto* on = t.get("order"); ordered && on) {
      const std::int64_t o = *on->value<std::int64_t>();
      if (o < std::numeric_limits<int>::min() || o > std::numeric_limits<int>::max())
        throw error(where(*on), "'order' in " + section + " must be between " +
                                    std::to_string(std::numeric_limits<int>::min()) + " and " +
                                    std::to_string(std::numeric_limits<int>::max()));
    }
    if (auto* en = t.get("enabled"); en && !en->is_boolean())
      throw error(where(*en), "'enabled' in " + section + " must be true or false");
    if (auto it = seen.find(inst); it != seen.end())
      throw error(where(t.source()), "a second [[" + array + "]] instance named '" + inst +
                                         "' (the first is at " + it->second +
                                         "); give one of them name = \"...\"");
    seen[inst] = where(t.source());
  }
}

Config Config::parse(const std::string& text, const std::string& path,
                     const std::vector<std::string>& sets) {
  Config c;
  auto& I = *c.impl_;
  I.path = fs::absolute(path).lexically_normal().string();
  if (const auto at = toml_too_deep(text))
    throw ConfigError(I.path + ":" + std::to_string(at->line) + ":" + std::to_string(at->column) +
                      ": the text " + too_deep_message());
  try {
    I.root = toml::parse(text, I.path);
  } catch (const toml::parse_error& e) {
    throw ConfigError(I.where(e.source()) + ": TOML syntax error: " + std::string(e.description()));
  }
  for (const auto& s : sets) I.apply_set(s);
  I.validate_builtin();
  I.trainer.overrides = sets;
  return c;
}

Config Config::load(const std::string& path, const std::vector<std::string>& sets) {
  // Opened without blocking (a FIFO would wait for a writer), then only a regular file of at
  // most kMaxConfigBytes is read: /dev/zero or a FIFO would never end.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw ConfigError(path + ": cannot read the config file: " + std::strerror(err) +
                      (err == ENOENT ? " (is the path right?)" : ""));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw ConfigError(path + ": not a regular file; a config must be a TOML file");
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ConfigError(path + ": cannot read the config file: " + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > kMaxConfigBytes)
      throw ConfigError(path + ": the config file is larger than " +
                        std::to_string(kMaxConfigBytes >> 20) +
                        " MiB, the most wick reads; is it the right file?");
  }
  return parse(text, path, sets);
}

std::string Config::toml() const {
  std::ostringstream o;
  o << toml::toml_formatter{impl_->root};
  return o.str() + "\n";
}

const std::string& Config::path() const {
  return impl_->path;
}
const TrainerOptions& Config::trainer() const {
  return impl_->trainer;
}
const OptimizerOptions& Config::optimizer() const {
  return impl_->optimizers.front();
}
const std::vector<OptimizerOptions>& Config::optimizers() const {
  return impl_->optimizers;
}
bool Config::has_optimizer() const {
  return impl_->has_optimizer;
}
bool Config::has_task() const {
  return !impl_->task_plugin.empty();
}
const std::string& Config::data_parallel_plugin() const {
  return impl_->data_parallel_plugin;
}
const std::string& Config::profiler_plugin() const {
  return impl_->profiler_plugin;
}
const std::string& Config::task_plugin() const {
  return impl_->task_plugin;
}

std::optional<std::string> Config::hook_string(const std::string& plugin,
                                               const std::string& key) const {
  auto* an = impl_->root.get("hooks");
  if (!an) return std::nullopt;
  for (auto& n : *an->as_array()) {
    const auto& t = *n.as_table();
    if (t["enabled"].value_or(true) && t["plugin"].value_or(std::string()) == plugin)
      return t[key].value<std::string>();
  }
  return std::nullopt;
}

std::vector<std::string> Config::search_path(const std::vector<std::string>& extra) const {
  std::vector<std::string> dirs = extra;
  dirs.insert(dirs.end(), impl_->plugin_dirs.begin(), impl_->plugin_dirs.end());
  return plugin_search_path(dirs);
}

std::vector<Config::Impl::Instance> Config::Impl::instances(
    const PluginFinder& finder, const std::string& array, PluginKind kind,
    const std::vector<std::string>& reserved) const {
  std::vector<Instance> out;
  auto* an = root.get(array);
  if (!an) return out;
  for (auto& n : *an->as_array()) {
    const auto& t = *n.as_table();
    if (!t["enabled"].value_or(true)) continue;
    const std::string plugin = *t["plugin"].value<std::string>();
    const std::string name = t["name"].value_or(plugin);
    auto lib = find_plugin(finder, t, kind);
    Params p = plugin_params(t, lib->info(), "[" + array + "." + name + "]", reserved, name);
    out.push_back({&t, plugin, name, std::move(lib), std::move(p)});
  }
  return out;
}

std::vector<HookEntry> Config::make_hooks(const PluginFinder& finder) const {
  std::vector<HookEntry> out;
  std::map<std::string, std::string> first_at;  // one-instance plugin -> its table's place
  for (auto& i : impl_->instances(finder, "hooks", PluginKind::hook, kHookReserved)) {
    if (i.lib->info().one_instance) {
      const auto here = impl_->where(i.table->source());
      const auto [it, fresh] = first_at.emplace(i.plugin, here);
      if (!fresh)
        throw ConfigError(here + ": a second [[hooks]] plugin = \"" + i.plugin +
                          "\" (the first is at " + it->second +
                          "); it takes one instance, "
                          "since a second would redo its work on every step: keep one");
    }
    HookEntry e;
    e.plugin = i.plugin;
    e.instance = i.name;
    e.order =
        static_cast<int>((*i.table)["order"].value_or<std::int64_t>(i.lib->info().default_order));
    e.main_process_only = i.lib->info().main_process_only;
    e.library = i.lib->info().path;
    e.api_minor = i.lib->info().api_minor;
    e.hook = impl_->construct(i, [&] { return i.lib->create_hook(i.params); });
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<MetricEntry> Config::make_metrics(const PluginFinder& finder) const {
  std::vector<MetricEntry> out;
  for (auto& i : impl_->instances(finder, "metrics", PluginKind::metric, kMetricReserved))
    out.push_back({impl_->construct(i, [&] { return i.lib->create_metric(i.params); }), i.plugin,
                   i.name, i.lib->info().api_minor});
  return out;
}

namespace {
const toml::table& task_table(const Config::Impl& I) {
  if (I.task_plugin.empty())
    throw ConfigError(I.path +
                      ": no [task] table; add one naming the task plugin, e.g.\n"
                      "[task]\nplugin = \"synthetic\"");
  return *I.root.get("task")->as_table();
}
}  // namespace

Params Config::task_params(const PluginFinder& finder) const {
  const auto& t = task_table(*impl_);
  auto lib = impl_->find_plugin(finder, t, PluginKind::task);
  return impl_->plugin_params(t, lib->info(), "[task]", kTaskReserved, impl_->task_plugin);
}

void Config::check_task(const PluginFinder& finder) const {
  (void)task_params(finder);
}

std::shared_ptr<Task> Config::make_task(const PluginFinder& finder) const {
  const Params p = task_params(finder);
  auto lib = finder.find(impl_->task_plugin);
  try {
    return lib->create_task(p);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& ex) {
    // A LibTorch error (a size it refused) without its C++ backtrace (this source is
    // torch-free: c10::Error's own what_without_backtrace is out of reach).
    throw std::runtime_error("task plugin '" + impl_->task_plugin +
                             "' could not start: " + without_backtraces(ex.what()));
  }
}

}  // namespace wick
