// Private: the storage behind wick::Params, filled by config validation.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "wick/params.hpp"
#include "wick/run.hpp"

namespace wick {

using ParamValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                                std::vector<double>, std::vector<std::string>>;

// Hidden, as its declaration in wick/params.hpp says.
struct Params::Impl {
  struct Entry {
    ParamType type;
    ParamValue value;
    std::string where;  // "file:line:col" of the value, or "--set key" ("" for a default)
    bool set = false;   // present (from config or default)
  };
  std::string plugin;
  std::string instance;
  std::string table_where;  // where the plugin's table starts
  std::string section;      // "[task]", "[hooks.NAME]", for messages
  std::string base_dir;     // folder of the config file: get_path() resolves against it
  std::map<std::string, Entry, std::less<>> entries;  // every declared key
  RunInfo run;  // the run's facts as the config gives them (Params::run)
};

}  // namespace wick
