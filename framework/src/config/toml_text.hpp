// Private: TOML values and plugin parameter types as text, for the config's error messages.
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <string>

#include "wick/params.hpp"

namespace wick {

// "a string", "an integer", ...: what a TOML node is.
const char* node_type_name(const toml::node& n);
// "a boolean (true or false)", "an array of integers", ...: what a parameter must be.
const char* type_phrase(ParamType t);
// A value as TOML, inline, cut to about `limit` characters (at least 3; SIZE_MAX: whole).
std::string toml_text(const toml::node& n, std::size_t limit = 40);
// A value for a message: control characters shown as '?', at most 60 characters.
std::string printable(const std::string& s);

}  // namespace wick
