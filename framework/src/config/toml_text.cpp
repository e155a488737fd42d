// TOML values and parameter types as text, for the config's error messages.
#include "config/toml_text.hpp"

#include <sstream>

namespace wick {

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
    case ParamType::floating_inf:
      return "a number or inf";
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
namespace {
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

}  // namespace

std::string toml_text(const toml::node& n, std::size_t limit) {
  std::string s;
  append_toml(s, n, limit);
  return s.size() > limit ? s.substr(0, limit - 3) + "..." : s;
}

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 60)) out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  return s.size() > 60 ? out + "..." : out;
}

}  // namespace wick
