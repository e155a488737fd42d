// Declared plugin parameters and the validated values a plugin's factory receives.
// The host checks the TOML table against the declaration before the factory runs, so a
// plugin only reads keys it declared, with the types it declared.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "wick/run.hpp"
#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

enum class ParamType : std::uint8_t {
  boolean,
  integer,
  // A finite number within float32's range (LibTorch trains in it: 1e300 would be inf there, a
  // non-zero 1e-50 would be 0); accepts integers too. Since SDK 2.9 inf and out-of-range
  // values are refused for it, as nan always was.
  floating,
  string,
  int_list,
  float_list,
  string_list,
  choice,  // a string restricted to the choices the plugin declared (PluginDef::param_choice)
  // Since SDK 2.9: as floating, and inf or -inf too (PluginDef::param_float_inf, e.g. a norm's
  // order); read with get_float.
  floating_inf,
};
std::string_view to_string(ParamType t);

// A configuration error with its place: "FILE:LINE:COL: message" (or "--set KEY: message").
class WICK_EXPORT ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message) : std::runtime_error(message) {}
};

// Values of one plugin instance's table. Getters throw ConfigError for an undeclared key
// (a plugin bug, not a user error), so typos cannot slip through silently.
class WICK_EXPORT Params {
 public:
  Params();
  ~Params();
  Params(Params&&) noexcept;
  Params& operator=(Params&&) noexcept;

  const std::string& plugin() const;    // plugin name
  const std::string& instance() const;  // instance name (defaults to the plugin name)

  bool has(std::string_view key) const;  // set in the config, or declared with a default
  bool get_bool(std::string_view key) const;
  std::int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::string get_string(std::string_view key) const;  // a string or a choice
  std::vector<std::int64_t> get_int_list(std::string_view key) const;
  std::vector<double> get_float_list(std::string_view key) const;
  std::vector<std::string> get_string_list(std::string_view key) const;
  // A string parameter naming a file or folder, made absolute: a relative value is taken
  // relative to the config file's folder (as [plugins] path is), not the current directory.
  // Since SDK 1.1.
  std::string get_path(std::string_view key) const;
  // A string parameter naming a file the plugin writes in the run: relative to
  // trainer.output_dir, or absolute. Refused at the key when empty, when it names a folder, or
  // when it is one of the run's own files (metrics.jsonl, summary.json, model.pt, wick.lock),
  // which it would overwrite, and (since 2.24) when its name with the ".tmp" an atomic write
  // adds is longer than NAME_MAX. The writer creates the file's folder. Since SDK 2.22.
  std::string get_output_file(std::string_view key) const;

  // The run's facts as the config gives them, for checks that involve other sections (the
  // device and data-parallel rank are not resolved yet: device "auto" reads as cpu). Since 2.0.
  const RunInfo& run() const;

  // An error about the table as a whole (a conflict with another section), placed at the
  // table: throw p.error("needs trainer.nan_policy = \"error\""). Since 2.0.
  ConfigError error(std::string_view message) const;

  // An error about a value, placed at the key's position: throw p.error("max_norm", "must
  // be > 0"). Use it for checks the declared type cannot express.
  ConfigError error(std::string_view key, std::string_view message) const;

  // Not exported with its class (wick/version.hpp).
  struct WICK_INTERNAL Impl;
  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace wick

WICK_PUBLIC_END
