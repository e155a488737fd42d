// Files and folders a plugin writes.
#pragma once

#include <charconv>
#include <memory>
#include <string>
#include <system_error>  // std::errc

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// Replaces `path` with `bytes` atomically: a temporary file beside it, fsync, rename, fsync
// of the folder. A reader sees the old content or the new, never half of it. Throws
// std::runtime_error naming the file and the cause.
WICK_EXPORT void write_file_atomic(const std::string& path, const std::string& bytes);

// Since SDK 2.24: V as printf's %.{digits}g writes it in the "C" locale, whatever locale a host
// program set: a decimal comma would break a CSV column or a TOML value. `digits` is taken
// between 1 and 40 (a double has 17 significant digits).
inline std::string number_text(double v, int digits) {
  char buf[64];  // "-", 40 digits, ".", "e-308"
  const int p = digits < 1 ? 1 : digits > 40 ? 40 : digits;
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, p);
  return r.ec == std::errc() ? std::string(buf, r.ptr) : std::string("nan");
}

// Since SDK 2.24: V as a TOML float (number_text with a ".0" where it would read as an
// integer), for a value written into a config or a plugin's declared default.
inline std::string toml_float(double v, int digits) {
  std::string s = number_text(v, digits);
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

// Since SDK 2.24: holds FOLDER/wick.lock for as long as the returned handle lives, as a fit
// holds its output folder's, so that two runs never write one folder (the checkpoint plugin's,
// when two configs give the same `dir`). The lock goes with its process however that ends.
// Throws std::runtime_error when it cannot be written, and wick::ConfigError naming the holder
// (wick pid P on host H) when a live process holds it; `what` names the folder in messages
// ("checkpoint folder") and `fix` is the way out ("give each run its own hooks.NAME.dir"). The
// output folder itself is the fit's to lock: lock a folder of your own.
WICK_EXPORT std::shared_ptr<void> lock_folder(const std::string& folder, const std::string& what,
                                              const std::string& fix);

}  // namespace wick

WICK_PUBLIC_END
