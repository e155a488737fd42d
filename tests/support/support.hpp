// Helpers shared by the tests: temporary folders, files, running the wick command.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>
#include <wick/loader.hpp>

namespace wick::test {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
};
// Removes the folders of the TempDirs still alive (static ones), before the process ends
// without its static destructors (tests/support/main.cpp).
void remove_live_temp_dirs();

void write_file(const fs::path& p, const std::string& text);
std::string read_file(const fs::path& p);
// The CPU flags /proc/cpuinfo lists, less those WICK_CPU_DISABLE hides (README: CPU paths),
// read here independently of wick's own parsing.
std::set<std::string> cpu_flags();
// Every file under dir (path relative to it -> sha256): "left intact" means this map did not
// change.
std::map<std::string, std::string> file_hashes(const fs::path& dir);
nlohmann::json read_json(const fs::path& p);
std::vector<nlohmann::json> read_jsonl(const fs::path& p);
// The whitespace-separated numbers of a file (a test plugin's dump of parameters); a missing
// or empty file fails the test, so that comparisons of two empty lists cannot pass.
std::vector<double> read_numbers(const fs::path& p);
// The largest |a[i] - b[i]|; lists of different lengths fail the test.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
// The record keys that hold timings or memory (they differ between two runs of the same
// training): time_s, epoch_time_s, samples_per_s, train/flops_per_s, ...
bool is_timing_key(const std::string& key);
// The records of DIR/run/metrics.jsonl without their timings: what must agree between two runs
// of the same training (an uninterrupted one and a resumed one).
std::vector<std::string> logged_values(const TempDir& dir);

struct RunResult {
  int exit_code = -1;  // exit status, or 128 + signal when killed by one
  std::string out;     // stdout
  std::string err;     // stderr
};
// Runs a program with arguments (no shell), waits, captures both streams.
RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
// Runs build/bin/wick with the arguments.
RunResult run_wick(const std::vector<std::string>& args, const std::vector<std::string>& env = {});
// `wick check FILE --set S...`: the first call of a test process runs the command; later calls
// run what it runs in this process (wick::check_config) and give what it would print and exit
// with. A test of many configs so checks the command's output once and costs one start.
RunResult wick_check(const fs::path& file, const std::vector<std::string>& sets = {});

// Runs `body` with this process's standard output and error going to files, and appends what
// they received to `out` and `err` (what a child's would have printed: warnings included).
void capturing(const std::function<void()>& body, std::string& out, std::string& err);

// The [plugins] line that makes a config find the test-only plugins.
std::string test_plugins_toml();

// Runs f, which must throw a wick::PluginError of kind k; returns the error's message.
template <class F>
std::string refused(wick::PluginError::Kind k, F&& f) {
  try {
    f();
  } catch (const wick::PluginError& e) {
    CHECK(static_cast<int>(e.kind) == static_cast<int>(k));
    return e.what();
  }
  FAIL("no PluginError thrown");
  return {};
}

// The python3 the tests run (WICK_TEST_PYTHON in CMake; Debian's /usr/bin/python3 by default):
// TorchScript models and data made as users make them (torch), reference metrics (sklearn).
inline constexpr const char* kPython = WICK_PYTHON;
// Skips the test (see skip) unless kPython imports every module named.
void need_python(const std::vector<std::string>& modules);

// Whether an executable `program` is on PATH.
bool on_path(const std::string& program);
// Skips the test (see skip) unless `program` is on PATH.
void need_program(const std::string& program, const std::string& package);

// Ends a test that cannot run here (no GPU, not root, a tool missing) as skipped: prints why
// and exits with kSkipped, which ctest reports as "Skipped" (SKIP_RETURN_CODE, set on every
// test by wick_add_test), never as passed. Call it before the test makes anything to clean up.
inline constexpr int kSkipped = 77;
[[noreturn]] void skip(const std::string& why);

// An IDX file's header: the magic number, then each dimension, big-endian.
std::string idx_header(std::uint32_t magic, const std::vector<std::uint32_t>& dims);

}  // namespace wick::test
