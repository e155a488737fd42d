// Private: the names in a comma-separated list of an environment variable (WICK_CPU_DISABLE,
// WICK_CUDA_DISABLE), and where each is in the names that variable takes.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace wick {

// The names, each without the spaces and tabs around it; empty names are dropped.
inline std::vector<std::string> comma_names(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream words(text);
  for (std::string word; std::getline(words, word, ',');) {
    word.erase(0, word.find_first_not_of(" \t"));
    word.erase(word.find_last_not_of(" \t") + 1);
    if (!word.empty()) out.push_back(word);
  }
  return out;
}

// Where `name` is in `known`. One that is not there throws std::invalid_argument: "VAR: 'name'
// is not <what>; name some of <known, comma separated><more>, separated by commas".
template <std::size_t N>
std::size_t index_of_name(const char* var, const std::string& name, const char* const (&known)[N],
                          const std::string& what, const std::string& more = "") {
  for (std::size_t i = 0; i < N; ++i)
    if (name == known[i]) return i;
  std::string names;
  for (const char* n : known) names += std::string(names.empty() ? "" : ", ") + n;
  throw std::invalid_argument(std::string(var) + ": '" + name + "' is not " + what +
                              "; name some of " + names + more + ", separated by commas");
}

}  // namespace wick
