#include "wick/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <toml++/toml.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

#include "params_impl.hpp"

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

std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates) {
  auto lower = [](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string a = lower(key);
  const std::size_t limit = std::max<std::size_t>(1, std::min<std::size_t>(3, key.size() / 3));
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const auto& cand : candidates) {
    // The distance is at least the difference in length: a candidate that far off cannot be
    // suggested, and skipping it saves the table, which for a 4 MiB key (the largest config
    // read) took 700 MB and 20 s (found with fuzz/).
    const std::size_t gap =
        a.size() > cand.size() ? a.size() - cand.size() : cand.size() - a.size();
    if (gap > limit) continue;
    const std::string b = lower(cand);
    // Levenshtein distance, with adjacent transpositions counted as one edit.
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i)
      for (std::size_t j = 1; j <= b.size(); ++j) {
        std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    std::size_t dist = d[a.size()][b.size()];
    if (dist < best_d) {
      best_d = dist;
      best = cand;
    }
  }
  return best_d <= limit ? best : std::string();
}

namespace {

const char* node_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

const char* type_phrase(ParamType t) {
  switch (t) {
    case ParamType::boolean:
      return "a boolean (true or false)";
    case ParamType::integer:
      return "an integer";
    case ParamType::floating:
      return "a number";
    case ParamType::string:
    case ParamType::choice:
      return "a string";
    case ParamType::int_list:
      return "an array of integers";
    case ParamType::float_list:
      return "an array of numbers";
    case ParamType::string_list:
      return "an array of strings";
  }
  return "?";
}

// Appends a value as TOML, inline, until `out` is longer than `limit`. Arrays and tables are
// written here rather than by toml++'s formatter, which in 3.3.0 casts the log10 of a float
// below 1 to size_t when measuring a line (undefined behaviour, found with fuzz/) and would
// format all of a large array for the few characters a message shows.
void append_toml(std::string& out, const toml::node& n, std::size_t limit) {
  const auto scalar = [&](const toml::node& v) {
    std::ostringstream o;
    v.visit([&](auto&& x) { o << x; });
    out += o.str();
  };
  if (const auto* a = n.as_array()) {
    out += "[";
    for (std::size_t i = 0; i < a->size() && out.size() <= limit; ++i) {
      out += i ? ", " : " ";
      append_toml(out, *a->get(i), limit);
    }
    out += a->empty() ? "]" : " ]";
  } else if (const auto* t = n.as_table()) {
    out += "{";
    bool first = true;
    for (auto&& [k, v] : *t) {
      if (out.size() > limit) break;
      out += first ? " " : ", ";
      first = false;
      const std::string key(k.str());
      const bool bare = !key.empty() && key.find_first_not_of(
                                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "abcdefghijklmnopqrstuvwxyz"
                                            "0123456789_-") == std::string::npos;
      if (bare)
        out += key;
      else
        scalar(toml::value<std::string>(key));  // quoted and escaped as toml++ does
      out += " = ";
      append_toml(out, v, limit);
    }
    out += first ? "}" : " }";
  } else {
    scalar(n);
  }
}

std::string toml_text(const toml::node& n) {
  std::string s;
  append_toml(s, n, 40);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// Built-in schemas, in the same form as a plugin's declared parameters.
std::vector<ParamInfo> trainer_schema() {
  return {
      {"epochs", ParamType::integer, "1", "epochs to train"},
      {"seed", ParamType::integer, "0", "seed for initialisation and the sample order"},
      {"batch_size", ParamType::integer, "32",
       "training batch size per process, or \"auto\": the fastest power of two (CPU), the "
       "largest that fits (CUDA)"},
      {"max_batch_size", ParamType::integer, "1024", "batch_size = \"auto\": the largest tried"},
      {"valid_batch_size", ParamType::integer, "0", "validation batch size (0: batch_size)"},
      {"shuffle", ParamType::boolean, "true", "shuffle the training set each epoch"},
      {"drop_last", ParamType::boolean, "false", "drop the last, short training batch"},
      {"max_steps", ParamType::integer, "0", "stop after this many optimizer steps (0: off)"},
      {"log_every", ParamType::integer, "50", "write a step record every N batches (0: off)"},
      {"threads", ParamType::integer, "0", "intra-op threads (0: LibTorch default)"},
      {"num_workers", ParamType::integer, "0", "threads loading batches ahead (0: none)"},
      {"steps_per_epoch", ParamType::integer, "0", "batches per epoch (0: from the data)"},
      {"device", ParamType::string, "\"cpu\"", "cpu, cuda, cuda:N or auto"},
      {"nan_policy", ParamType::string, "\"error\"", "non-finite loss: error, skip or ignore"},
      {"output_dir", ParamType::string, "\"runs/default\"", "run directory"},
      {"save_model", ParamType::boolean, "true",
       "write the final weights to output_dir/model.pt when the fit ends"},
      {"flops", ParamType::boolean, "true",
       "count the FLOPs of a training step; log train/flops_per_s"},
      {"peak_gflops", ParamType::floating, "0.0",
       "peak GFLOP/s for train/flops_utilization (0: a probe measures it)"},
  };
}

std::vector<ParamInfo> optimizer_schema() {
  return {
      {"name", ParamType::string, "\"adam\"", "adam, adamw or sgd"},
      {"lr", ParamType::floating, "0.001", "learning rate"},
      {"weight_decay", ParamType::floating, "0.0", "weight decay (adamw default 0.01)"},
      {"betas", ParamType::float_list, "[0.9, 0.999]", "adam/adamw: coefficients"},
      {"eps", ParamType::floating, "1e-08", "adam/adamw: denominator term"},
      {"amsgrad", ParamType::boolean, "false", "adam/adamw: AMSGrad variant"},
      {"fused", ParamType::boolean, "false",
       "adam: update each float32 parameter in one pass, CPU or CUDA (same formulas, faster)"},
      {"momentum", ParamType::floating, "0.0", "sgd: momentum"},
      {"dampening", ParamType::floating, "0.0", "sgd: dampening"},
      {"nesterov", ParamType::boolean, "false", "sgd: Nesterov momentum"},
  };
}

// trainer.threads above this is refused: creating that many threads takes long and only slows.
constexpr std::int64_t kMaxThreads = 1024;

// An output folder that is empty or is the filesystem root, after "..", "." and symbolic
// links (relative paths are taken from the current directory, as the trainer does).
bool resolves_to_root(const std::string& dir) {
  if (dir.empty()) return true;
  std::error_code ec;
  const fs::path abs = fs::absolute(dir, ec);
  if (ec) return false;
  if (abs.lexically_normal() == abs.root_path()) return true;
  const fs::path canon = fs::weakly_canonical(abs, ec);
  return !ec && canon == canon.root_path();
}

// A value for a message: control characters shown as '?', at most 60 characters.
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 60)) out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  return s.size() > 60 ? out + "..." : out;
}

const std::vector<std::string> kTopLevel = {"trainer", "task",    "optimizer", "optimizers",
                                            "hooks",   "metrics", "plugins"};

std::vector<ParamInfo> group_schema() {
  return {
      {"params", ParamType::string, std::nullopt, "glob over parameter names, e.g. \"backbone.*\""},
      {"lr", ParamType::floating, "0.0", "this group's learning rate (default: the optimizer's)"},
      {"weight_decay", ParamType::floating, "0.0",
       "this group's weight decay (default: the optimizer's)"},
  };
}
const std::vector<std::string> kHookReserved = {"plugin", "name", "order", "enabled"};
const std::vector<std::string> kTaskReserved = {"plugin"};
const std::vector<std::string> kMetricReserved = {"plugin", "name", "enabled"};

}  // namespace

struct Config::Impl {
  std::string path;  // absolute
  toml::table root;
  // --set values: node -> ("--set k=v", raw value text), for messages and string coercion.
  std::map<const toml::node*, std::pair<std::string, std::string>> overrides;
  TrainerOptions trainer;
  std::vector<OptimizerOptions> optimizers;  // one, or one per [optimizers.NAME]
  bool has_optimizer = false;
  std::string task_plugin;
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

  // nan passes every range check written as "x < lo || x > hi", so no parameter takes it.
  double not_nan(double v, const toml::node& n, const std::string& key,
                 const std::string& section) const {
    if (std::isnan(v))
      throw error(where(n), "'" + key + "' in " + section + " must be a number, not nan");
    return v;
  }

  // Converts one value to its declared type; throws with its place when it does not fit.
  ParamValue convert(const toml::node& n, ParamType t, const std::string& key,
                     const std::string& section) const {
    auto bad = [&]() {
      return error(where(n), "'" + key + "' in " + section + " must be " + type_phrase(t) +
                                 ", not " + node_type_name(n) + " (" + toml_text(n) + ")");
    };
    // A --set value is typed by the schema: "--set task.model=mlp" is a string.
    if ((t == ParamType::string || t == ParamType::choice) && !n.is_string())
      if (auto it = overrides.find(&n); it != overrides.end()) return it->second.second;
    switch (t) {
      case ParamType::boolean:
        if (auto v = n.value<bool>(); v && n.is_boolean()) return *v;
        throw bad();
      case ParamType::integer:
        if (n.is_integer()) return *n.value<std::int64_t>();
        throw bad();
      case ParamType::floating:
        if (n.is_integer() || n.is_floating_point())
          return not_nan(*n.value<double>(), n, key, section);
        throw bad();
      case ParamType::string:
      case ParamType::choice:  // its value is checked against the choices by validate()
        if (n.is_string()) return *n.value<std::string>();
        throw bad();
      case ParamType::int_list: {
        auto* a = n.as_array();
        if (!a) throw bad();
        std::vector<std::int64_t> out;
        for (auto& e : *a) {
          if (!e.is_integer())
            throw error(where(e), "'" + key + "' in " + section +
                                      " must be an array of integers; this element is " +
                                      node_type_name(e));
          out.push_back(*e.value<std::int64_t>());
        }
        return out;
      }
      case ParamType::float_list: {
        auto* a = n.as_array();
        if (!a) throw bad();
        std::vector<double> out;
        for (auto& e : *a) {
          if (!e.is_integer() && !e.is_floating_point())
            throw error(where(e), "'" + key + "' in " + section +
                                      " must be an array of numbers; this element is " +
                                      node_type_name(e));
          out.push_back(not_nan(*e.value<double>(), e, key, section));
        }
        return out;
      }
      case ParamType::string_list: {
        auto* a = n.as_array();
        if (!a) throw bad();
        std::vector<std::string> out;
        for (auto& e : *a) {
          if (!e.is_string())
            throw error(where(e), "'" + key + "' in " + section +
                                      " must be an array of strings; this element is " +
                                      node_type_name(e));
          out.push_back(*e.value<std::string>());
        }
        return out;
      }
    }
    throw bad();
  }

  // A choice parameter's value must be one of its choices (its default was checked when the
  // plugin was loaded).
  void check_choice(const std::string& value, const ParamInfo& p, const toml::node& n,
                    const std::string& section) const {
    if (std::find(p.choices.begin(), p.choices.end(), value) != p.choices.end()) return;
    std::string msg = "'" + value + "' is not one of ";
    for (std::size_t i = 0; i < p.choices.size(); ++i)
      msg += (i ? ", \"" : "\"") + p.choices[i] + "\"";
    msg += " for '" + p.key + "' in " + section;
    if (auto s = did_you_mean(value, p.choices); !s.empty()) msg += "; did you mean \"" + s + "\"?";
    throw error(where(n), msg);
  }

  // Validates a table against a schema: unknown keys (with a suggestion), types, required
  // keys. Keys in `reserved` are allowed and skipped.
  Params validate(const toml::table& tbl, const std::vector<ParamInfo>& schema,
                  const std::string& section, const std::vector<std::string>& reserved,
                  const std::string& plugin, const std::string& instance) const {
    Params params;
    auto& P = params.impl();
    P.plugin = plugin;
    P.instance = instance;
    P.table_where = where(tbl.source());
    P.section = section;
    P.base_dir = fs::path(path).parent_path().string();
    std::vector<std::string> known = reserved;
    for (const auto& s : schema) known.push_back(s.key);
    for (auto&& [k, v] : tbl) {
      const std::string key(k.str());
      if (std::find(reserved.begin(), reserved.end(), key) != reserved.end()) continue;
      auto it = std::find_if(schema.begin(), schema.end(),
                             [&](const ParamInfo& s) { return s.key == key; });
      if (it == schema.end()) {
        std::string w = overrides.count(&v) ? where(v) : where(k.source());
        std::string msg = "unknown key '" + key + "' in " + section;
        if (auto s = did_you_mean(key, known); !s.empty())
          msg += "; did you mean '" + s + "'?";
        else {
          msg += "; known keys:";
          for (const auto& kk : known) msg += " " + kk;
        }
        throw error(w, msg);
      }
      Params::Impl::Entry e;
      e.type = it->type;
      e.value = convert(v, it->type, key, section);
      if (it->type == ParamType::choice)
        check_choice(std::get<std::string>(e.value), *it, v, section);
      e.where = where(v);
      e.set = true;
      P.entries[key] = std::move(e);
    }
    for (const auto& s : schema) {
      if (P.entries.count(s.key)) continue;
      Params::Impl::Entry e;
      e.type = s.type;
      if (!s.default_toml) {
        throw error(where(tbl.source()), "missing required key '" + s.key + "' in " + section +
                                             " (" + type_phrase(s.type) + ": " + s.help + ")");
      }
      auto doc = toml::parse("v = " + *s.default_toml);
      e.value = convert(*doc.get("v"), s.type, s.key, section);
      e.set = true;
      P.entries[s.key] = std::move(e);
    }
    return params;
  }

  // One optimizer's table: its options and its [[...groups]].
  OptimizerOptions read_optimizer(const toml::table* ot, const std::string& section,
                                  const std::string& module) const {
    const toml::table empty;
    OptimizerOptions o;
    o.module = module;
    o.where = ot ? where(ot->source()) : path;
    Params op = validate(ot ? *ot : empty, optimizer_schema(), section, {"groups"}, "optimizer",
                         module.empty() ? "optimizer" : module);
    o.name = op.get_string("name");
    o.lr = op.get_float("lr");
    o.weight_decay = op.get_float("weight_decay");
    o.weight_decay_set = ot && ot->contains("weight_decay");
    o.betas = op.get_float_list("betas");
    o.eps = op.get_float("eps");
    o.amsgrad = op.get_bool("amsgrad");
    o.fused = op.get_bool("fused");
    o.momentum = op.get_float("momentum");
    o.dampening = op.get_float("dampening");
    o.nesterov = op.get_bool("nesterov");
    auto check = [&](const Params& p, const char* key, bool ok, const std::string& msg) {
      this->check(p, key, ok, msg, section, o.where);
    };
    const auto& name = o.name;
    check(op, "name", name == "adam" || name == "adamw" || name == "sgd",
          "must be \"adam\", \"adamw\" or \"sgd\"");
    check(op, "lr", std::isfinite(o.lr) && o.lr > 0, "must be a finite number > 0");
    check(op, "betas", o.betas.size() == 2, "needs two values, e.g. [0.9, 0.999]");
    check(op, "betas",
          std::all_of(o.betas.begin(), o.betas.end(), [](double b) { return b >= 0 && b < 1; }),
          "must each be in [0, 1), e.g. [0.9, 0.999]");
    check(op, "eps", std::isfinite(o.eps) && o.eps > 0, "must be a finite number > 0");
    check(op, "fused", !o.fused || name == "adam", "is for name = \"adam\" only");
    check(op, "weight_decay", std::isfinite(o.weight_decay) && o.weight_decay >= 0,
          "must be a finite number >= 0");
    check(op, "momentum", o.momentum >= 0 && o.momentum <= 1, "must be in [0, 1]");
    check(op, "dampening", o.dampening >= 0 && o.dampening <= 1, "must be in [0, 1]");
    check(op, "nesterov", !o.nesterov || (o.momentum > 0 && o.dampening == 0),
          "needs momentum > 0 and dampening = 0");
    if (ot) {
      const std::vector<std::string> adam_only = {"betas", "eps", "amsgrad"};
      const std::vector<std::string> sgd_only = {"momentum", "dampening", "nesterov"};
      const auto& wrong = name == "sgd" ? adam_only : sgd_only;
      for (const auto& k : wrong)
        if (auto* n = ot->get(k))
          throw error(where(*n), "'" + k + "' in " + section + " does not apply to " + name +
                                     " (it is for " + (name == "sgd" ? "adam and adamw" : "sgd") +
                                     "); remove it or change name");
    }
    if (const auto* g = ot ? ot->get("groups") : nullptr) {
      const auto* arr = g->as_array();
      if (!arr || !arr->is_array_of_tables())
        throw error(where(*g), "'groups' in " + section + " must be tables: [[" +
                                   section.substr(1, section.size() - 2) +
                                   ".groups]] with params = \"glob\"");
      const std::string gsection = "[[" + section.substr(1, section.size() - 2) + ".groups]]";
      for (auto& n : *arr) {
        const auto& t = *n.as_table();
        Params gp = validate(t, group_schema(), gsection, {}, "optimizer", "group");
        ParamGroupOptions go;
        go.params = gp.get_string("params");
        go.where = where(t.source());
        if (t.contains("lr")) {
          go.lr = gp.get_float("lr");
          if (!(std::isfinite(*go.lr) && *go.lr > 0))
            throw error(where(*t.get("lr")),
                        "'lr' in " + gsection + " must be a finite number > 0");
        }
        if (t.contains("weight_decay")) {
          go.weight_decay = gp.get_float("weight_decay");
          if (!(std::isfinite(*go.weight_decay) && *go.weight_decay >= 0))
            throw error(where(*t.get("weight_decay")),
                        "'weight_decay' in " + gsection + " must be >= 0");
        }
        if (go.params.empty()) throw error(where(*t.get("params")), "'params' must not be empty");
        o.groups.push_back(std::move(go));
      }
    }
    return o;
  }

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
                        i.name + "') could not start: " + ex.what());
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
    r.device = trainer.device;
    r.seed = trainer.seed;
    r.epochs = trainer.epochs;
    r.max_steps = trainer.max_steps;
    r.batch_size = trainer.batch_size;
    r.valid_batch_size =
        trainer.valid_batch_size > 0 ? trainer.valid_batch_size : trainer.batch_size;
    r.shuffle = trainer.shuffle;
    r.drop_last = trainer.drop_last;
    r.nan_policy = trainer.nan_policy;
    if (const char* ws = std::getenv("WORLD_SIZE")) r.world_size = std::max(1L, std::atol(ws));
    if (const char* rk = std::getenv("RANK")) r.rank = std::atol(rk);
    return r;
  }
};

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
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed.insert("v", value);  // not a TOML literal: take it as a string
  }
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
  // batch_size = "auto" is the one string an integer key takes: validated as the default,
  // chosen later by make_trainer(); put back afterwards, so that toml() keeps "auto".
  const toml::node* auto_node = tt ? tt->get("batch_size") : nullptr;
  if (auto_node && auto_node->is_string()) {
    if (auto_node->value_or(std::string()) != "auto")
      throw error(where(*auto_node),
                  "trainer.batch_size must be an integer or \"auto\" (the fastest power of two "
                  "on the CPU, the largest that fits on CUDA), not " +
                      toml_text(*auto_node));
    root.get("trainer")->as_table()->insert_or_assign("batch_size", 32);
    trainer.auto_batch_size = true;
  }
  Params tp = validate(tt ? *tt : empty, trainer_schema(), "[trainer]", {}, "trainer", "trainer");
  trainer.epochs = tp.get_int("epochs");
  trainer.seed = tp.get_int("seed");
  trainer.batch_size = tp.get_int("batch_size");
  trainer.max_batch_size = tp.get_int("max_batch_size");
  if (trainer.auto_batch_size)
    root.get("trainer")->as_table()->insert_or_assign("batch_size", "auto");
  trainer.valid_batch_size = tp.get_int("valid_batch_size");
  trainer.shuffle = tp.get_bool("shuffle");
  trainer.drop_last = tp.get_bool("drop_last");
  trainer.max_steps = tp.get_int("max_steps");
  trainer.log_every = tp.get_int("log_every");
  trainer.threads = tp.get_int("threads");
  trainer.num_workers = tp.get_int("num_workers");
  trainer.steps_per_epoch = tp.get_int("steps_per_epoch");
  const auto device = tp.get_string("device");
  const auto nan_policy = tp.get_string("nan_policy");
  trainer.output_dir = tp.get_string("output_dir");
  trainer.save_model = tp.get_bool("save_model");
  trainer.flops = tp.get_bool("flops");
  trainer.peak_gflops = tp.get_float("peak_gflops");
  const std::string trainer_where = where(tt ? tt->source() : toml::source_region{});
  auto check = [&](const Params& p, const char* key, bool ok, const std::string& msg,
                   const char* section) { Impl::check(p, key, ok, msg, section, trainer_where); };
  // Values wrong on their face are refused here, so that `wick check` finds them and `wick fit`
  // stops before any data is loaded.
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  check(tp, "epochs", trainer.epochs >= 0, "must be >= 0 (0: nothing trained)", "[trainer]");
  // Batch sizes stay far from int64 overflow in the batch arithmetic.
  check(tp, "batch_size", trainer.batch_size >= 1 && trainer.batch_size <= kIntMax,
        "must be between 1 and " + std::to_string(kIntMax), "[trainer]");
  check(tp, "max_batch_size", trainer.max_batch_size >= 1 && trainer.max_batch_size <= kIntMax,
        "must be between 1 and " + std::to_string(kIntMax), "[trainer]");
  check(tp, "valid_batch_size",
        trainer.valid_batch_size >= 0 && trainer.valid_batch_size <= kIntMax,
        "must be between 0 (same as batch_size) and " + std::to_string(kIntMax), "[trainer]");
  check(tp, "max_steps", trainer.max_steps >= 0, "must be >= 0 (0: no limit)", "[trainer]");
  check(tp, "log_every", trainer.log_every >= 0, "must be >= 0 (0: epoch records only)",
        "[trainer]");
  check(tp, "threads", trainer.threads >= 0 && trainer.threads <= kMaxThreads,
        "must be between 0 (LibTorch's default) and " + std::to_string(kMaxThreads) +
            "; more threads than cores only slows training, so set at most the number of cores "
            "(`wick doctor` shows it)",
        "[trainer]");
  check(tp, "peak_gflops", trainer.peak_gflops >= 0 && std::isfinite(trainer.peak_gflops),
        "must be >= 0 (0: measured with a short matrix-product probe)", "[trainer]");
  check(tp, "num_workers", trainer.num_workers >= 0, "must be >= 0 (0: load on the main thread)",
        "[trainer]");
  check(tp, "steps_per_epoch", trainer.steps_per_epoch >= 0, "must be >= 0 (0: from the data)",
        "[trainer]");
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
  check(tp, "nan_policy", nan_policy == "error" || nan_policy == "skip" || nan_policy == "ignore",
        "must be \"error\", \"skip\" or \"ignore\"", "[trainer]");
  trainer.nan_policy = nan_policy == "skip"     ? NanPolicy::skip
                       : nan_policy == "ignore" ? NanPolicy::ignore
                                                : NanPolicy::error;
  const auto parsed = parse_device(device);
  check(tp, "device", device == "auto" || (parsed && parsed->index <= 127),
        "must be \"cpu\", \"cuda\", \"cuda:N\" (N from 0 to 127) or \"auto\", not \"" +
            printable(device) + "\"",
        "[trainer]");
  trainer.auto_device = device == "auto";
  if (parsed) trainer.device = *parsed;
  check(tp, "output_dir", !resolves_to_root(trainer.output_dir),
        trainer.output_dir.empty()
            ? std::string("must name a run folder, not be empty (e.g. \"runs/my-run\")")
            : "must name a run folder, not the filesystem root (\"" +
                  printable(trainer.output_dir) + "\" resolves to /)",
        "[trainer]");

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
      if (k.str() != "path") {
        std::string msg = "unknown key '" + std::string(k.str()) + "' in [plugins]";
        if (did_you_mean(std::string(k.str()), {"path"}) == "path") msg += "; did you mean 'path'?";
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
    if (auto* nn = t.get("name")) {
      if (!nn->is_string()) throw error(where(*nn), "'name' in [[" + array + "]] must be a string");
      inst = *nn->value<std::string>();
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
  if (fd < 0) throw ConfigError(path + ": cannot read the config file (does it exist?)");
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
  for (auto& i : impl_->instances(finder, "hooks", PluginKind::hook, kHookReserved)) {
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

void Config::check_task(const PluginFinder& finder) const {
  const auto& t = task_table(*impl_);
  auto lib = impl_->find_plugin(finder, t, PluginKind::task);
  impl_->plugin_params(t, lib->info(), "[task]", kTaskReserved, impl_->task_plugin);
}

std::shared_ptr<Task> Config::make_task(const PluginFinder& finder) const {
  check_task(finder);
  const auto& t = task_table(*impl_);
  auto lib = finder.find(impl_->task_plugin);
  Params p = impl_->plugin_params(t, lib->info(), "[task]", kTaskReserved, impl_->task_plugin);
  try {
    return lib->create_task(p);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& ex) {
    throw std::runtime_error("task plugin '" + impl_->task_plugin +
                             "' could not start: " + ex.what());
  }
}

}  // namespace wick
