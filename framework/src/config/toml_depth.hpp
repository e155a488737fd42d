// Private: how deep a TOML text nests, measured before toml++ parses it.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for its test (tests/test_config.cpp).
WICK_PUBLIC_BEGIN

namespace wick {

// toml++ builds, walks and frees a document's tables by recursion, a level a dotted key part,
// table header part, inline table and array: a deep enough text overflows the stack. No
// config comes near this many levels.
constexpr int kMaxTomlDepth = 1000;

struct TextPlace {
  std::size_t line = 1, column = 1;
};

// Where the text first nests deeper than kMaxTomlDepth, or nothing. It follows TOML's lexical
// structure: strings and comments are skipped, a '.' counts in a key (not in a float), and an
// inline table or array nests its contents a level deeper. Text that is not TOML is measured
// as far as it goes (the parser then says what is wrong with it).
std::optional<TextPlace> toml_too_deep(std::string_view text);

}  // namespace wick

WICK_PUBLIC_END
