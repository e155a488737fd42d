// Differences in [task] and [[hooks]] between a checkpoint's config and a resume's.
#include "config/config_changes.hpp"

#include <toml++/toml.h>

#include <cstdint>  // SIZE_MAX
#include <map>
#include <set>

#include "config/toml_text.hpp"

namespace wick {

namespace {

// The enabled [[hooks]] tables by instance name (`name`, else the plugin's).
std::map<std::string, const toml::table*> hook_tables(const toml::table& root) {
  std::map<std::string, const toml::table*> out;
  const auto* arr = root["hooks"].as_array();
  if (!arr) return out;
  for (const auto& n : *arr) {
    const auto* t = n.as_table();
    if (!t || !t->get("plugin") || !(*t)["enabled"].value_or(true)) continue;
    out[(*t)["name"].value_or((*t)["plugin"].value_or(std::string()))] = t;
  }
  return out;
}

void compare(const std::string& prefix, const toml::table& then, const toml::table& now,
             std::vector<std::string>& out) {
  std::set<std::string> keys;
  for (const auto& [k, v] : then) keys.insert(std::string(k.str()));
  for (const auto& [k, v] : now) keys.insert(std::string(k.str()));
  for (const auto& k : keys) {
    if (k == "name" || k == "enabled") continue;
    const auto* a = then.get(k);
    const auto* b = now.get(k);
    const auto text = [](const toml::node* n, std::size_t limit) {
      return n ? toml_text(*n, limit) : std::string("(unset)");
    };
    // Compared whole (two long paths may differ only at their ends), shown cut.
    if (text(a, SIZE_MAX) != text(b, SIZE_MAX))
      out.push_back(prefix + k + ": " + text(a, 60) + " -> " + text(b, 60));
  }
}

}  // namespace

std::vector<std::string> config_changes(const std::string& then_toml, const std::string& now_toml) {
  toml::table then, now;
  try {
    then = toml::parse(then_toml);
    now = toml::parse(now_toml);
  } catch (const toml::parse_error&) {
    return {};
  }
  std::vector<std::string> out;
  const toml::table none;
  const auto* tt = then["task"].as_table();
  const auto* nt = now["task"].as_table();
  compare("task.", tt ? *tt : none, nt ? *nt : none, out);
  const auto was = hook_tables(then), is = hook_tables(now);
  for (const auto& [name, t] : was)
    if (!is.count(name)) out.push_back("hooks." + name + ": removed");
  for (const auto& [name, t] : is) {
    auto it = was.find(name);
    if (it == was.end())
      out.push_back("hooks." + name + ": added");
    else
      compare("hooks." + name + ".", *it->second, *t, out);
  }
  return out;
}

}  // namespace wick
