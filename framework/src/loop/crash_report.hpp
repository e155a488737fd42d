// Private: what a fit leaves when its process dies of a fatal signal (a plugin's bad pointer, a
// failed assertion's abort), exits (a plugin's exit()) or is ended at once by a further stop
// signal: a line on stderr naming the plugin and point that were running, and summary.json
// saying failed with the same, where it said "running". A fatal signal then kills the process
// as it would have: the same exit status, a core where the system keeps one, and the handler
// that was there before (a host program's, a sanitizer's) still runs.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace wick {

class Dispatcher;

// Reports for the fit whose dispatcher `loop` is, while it lives; nested fits (a sweep's)
// report for the innermost.
class CrashReportScope {
 public:
  explicit CrashReportScope(const Dispatcher& loop);
  ~CrashReportScope();
  CrashReportScope(const CrashReportScope&) = delete;
  CrashReportScope& operator=(const CrashReportScope&) = delete;

  // The summary a crash writes to `file`: `json`, in which the text `marker` (the error's
  // value) is replaced by the report. Kept until the next call or disarm_summary().
  static void arm_summary(const std::filesystem::path& file, const std::string& json,
                          std::string_view marker);
  static void disarm_summary();

  // From a stop signal's handler, before it ends the process at once (a second Ctrl-C): the
  // line on stderr and the armed summary, saying so. Async-signal-safe.
  static void report_exit_now(const char* signal_name);

 private:
  const Dispatcher* outer_;
};

}  // namespace wick
