// A config table against a schema (a plugin's declared parameters, or a built-in table's):
// unknown keys with a suggestion, each value converted to its declared type, choices, and
// required keys; every error names the value's place.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "config/config_impl.hpp"
#include "config/toml_text.hpp"

namespace wick {

namespace fs = std::filesystem;

double Config::Impl::checked_float(double v, const toml::node& n, const std::string& key,
                                   const std::string& section, bool inf_allowed) const {
  const std::string what = "'" + key + "' in " + section;
  if (std::isnan(v)) throw error(where(n), what + " must be a number, not nan");
  if (std::isinf(v)) {
    if (inf_allowed) return v;
    throw error(where(n), what + " must be a finite number, not " + (v > 0 ? "inf" : "-inf"));
  }
  // The value as training uses it, in float32.
  const auto f = static_cast<float>(v);
  char shown[32];
  std::snprintf(shown, sizeof shown, "%g", v);
  if (std::isinf(f))
    throw error(where(n), what + " is " + shown + ", beyond float32's range (3.4e+38), " +
                              "the precision training computes in; use a smaller value");
  if (f == 0 && v != 0)
    throw error(where(n), what + " is " + shown + ", which float32 (the precision " +
                              "training computes in) rounds to 0; use 0 or a value of at least " +
                              "1e-38");
  return v;
}

// Converts one value to its declared type; throws with its place when it does not fit.
ParamValue Config::Impl::convert(const toml::node& n, ParamType t, const std::string& key,
                                 const std::string& section) const {
  auto bad = [&]() {
    return error(where(n), "'" + key + "' in " + section + " must be " + type_phrase(t) + ", not " +
                               node_type_name(n) + " (" + toml_text(n) + ")");
  };
  // An element of a list given by --set is placed at that --set (its text has no file line).
  auto at = [&](const toml::node& e) { return overrides.count(&n) ? where(n) : where(e); };
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
    case ParamType::floating_inf:
      if (n.is_integer() || n.is_floating_point())
        return checked_float(*n.value<double>(), n, key, section, t == ParamType::floating_inf);
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
          throw error(at(e), "'" + key + "' in " + section +
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
          throw error(at(e), "'" + key + "' in " + section +
                                 " must be an array of numbers; this element is " +
                                 node_type_name(e));
        out.push_back(checked_float(*e.value<double>(), e, key, section, false));
      }
      return out;
    }
    case ParamType::string_list: {
      auto* a = n.as_array();
      if (!a) throw bad();
      std::vector<std::string> out;
      for (auto& e : *a) {
        if (!e.is_string())
          throw error(at(e), "'" + key + "' in " + section +
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
void Config::Impl::check_choice(const std::string& value, const ParamInfo& p, const toml::node& n,
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
Params Config::Impl::validate(const toml::table& tbl, const std::vector<ParamInfo>& schema,
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
      throw error(where(tbl.source()), "missing required key '" + s.key + "' in " + section + " (" +
                                           type_phrase(s.type) + ": " + s.help + ")");
    }
    auto doc = toml::parse("v = " + *s.default_toml);
    e.value = convert(*doc.get("v"), s.type, s.key, section);
    e.set = true;
    P.entries[s.key] = std::move(e);
  }
  return params;
}

}  // namespace wick
