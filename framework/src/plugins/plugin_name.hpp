// Private: the word a plugin's name (and a parameter's key) must be. Names become file names
// (wick_NAME.so) and TOML keys, so the config, the finder and the loader hold them to one rule.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string_view>

namespace wick {

constexpr std::size_t kMaxPluginName = 64;

// Letters, digits and '_', at most kMaxPluginName characters.
inline bool is_plugin_word(std::string_view s) {
  return !s.empty() && s.size() <= kMaxPluginName && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// For messages: what is_plugin_word asks.
constexpr const char* kPluginWordRule = "letters, digits and '_', at most 64 characters";

}  // namespace wick
