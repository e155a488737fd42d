#include "support.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "wick/check.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/sha256.hpp"

extern char** environ;

namespace wick::test {

namespace {

// The folders of the TempDirs alive: a static one has no destructor run at the tests' exit
// (exit_without_teardown), so main removes what is left.
std::set<fs::path>& live_temp_dirs() {
  static std::set<fs::path> dirs;
  return dirs;
}

void remove_folder(const fs::path& path) {
  std::error_code ec;
  // Make read-only folders made by fault tests removable again.
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(path, ec);
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "wick-test-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
  live_temp_dirs().insert(path_);
}

TempDir::~TempDir() {
  remove_folder(path_);
  live_temp_dirs().erase(path_);
}

void remove_live_temp_dirs() {
  for (const auto& d : live_temp_dirs()) remove_folder(d);
  live_temp_dirs().clear();
}

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, std::string> file_hashes(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out[fs::relative(e.path(), dir).string()] = wick::sha256_hex(read_file(e.path()));
  return out;
}

nlohmann::json read_json(const fs::path& p) {
  return nlohmann::json::parse(read_file(p));
}

std::vector<nlohmann::json> read_jsonl(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(p));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<double> read_numbers(const fs::path& p) {
  std::istringstream in(read_file(p));
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  REQUIRE_FALSE(v.empty());
  return v;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

bool is_timing_key(const std::string& key) {
  for (const char* k : {"time_s", "epoch_time_s", "samples_per_s", "train/flops_per_s",
                        "train/flops_utilization", "peak_rss_mb"})
    if (key == k) return true;
  return false;
}

std::vector<std::string> logged_values(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& l : read_jsonl(dir / "run" / "metrics.jsonl")) {
    nlohmann::json kept;
    for (const auto& [k, v] : l.items())
      if (!is_timing_key(k)) kept[k] = v;
    out.push_back(kept.dump());
  }
  return out;
}

namespace {
std::string slurp(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return s;
}
}  // namespace

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
  posix_spawn_file_actions_addclose(&fa, err_pipe[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Each extra variable in place of an inherited one of its name (and of an earlier extra):
  // getenv() takes the first of two, the dynamic loader the last.
  const auto name_of = [](const char* e) { return std::string(e, std::strcspn(e, "=")); };
  std::set<std::string> named;
  std::vector<char*> envp;
  for (auto it = env.rbegin(); it != env.rend(); ++it)
    if (named.insert(name_of(it->c_str())).second) envp.push_back(const_cast<char*>(it->c_str()));
  for (char** e = environ; *e; ++e)
    if (!named.count(name_of(*e))) envp.push_back(*e);
  envp.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) throw std::runtime_error("cannot run " + argv[0]);
  RunResult r;
  std::thread t([&] { r.err = slurp(err_pipe[0]); });
  r.out = slurp(out_pipe[0]);
  t.join();
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  return r;
}

RunResult run_wick(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<std::string> argv = {WICK_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, env);
}

void capturing(const std::function<void()>& body, std::string& out, std::string& err) {
  std::fflush(nullptr);
  const TempDir dir;
  const fs::path paths[2] = {dir / "stdout", dir / "stderr"};
  int files[2], saved[2];
  for (int i = 0; i < 2; ++i) {
    files[i] = ::open(paths[i].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (files[i] < 0) throw std::runtime_error("capturing: cannot create " + paths[i].string());
    saved[i] = ::dup(i + 1);
    ::dup2(files[i], i + 1);
  }
  std::exception_ptr failure;
  try {
    body();
  } catch (...) {
    failure = std::current_exception();
  }
  std::fflush(nullptr);
  for (int i = 0; i < 2; ++i) {
    ::dup2(saved[i], i + 1);
    ::close(saved[i]);
    ::close(files[i]);
    (i == 0 ? out : err) += read_file(paths[i]);
  }
  if (failure) std::rethrow_exception(failure);
}

RunResult wick_check(const fs::path& file, const std::vector<std::string>& sets) {
  // The first check of a test process goes through the command: its output and exit code.
  static bool command_seen = false;
  if (!command_seen) {
    command_seen = true;
    std::vector<std::string> args = {"check", file.string()};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    return run_wick(args);
  }
  // The rest in process: what the command runs (wick::check_config), printed as the command
  // prints it (framework/cli: a ConfigError or PluginError exits 2, any other error 1).
  RunResult r;
  std::string line;
  try {
    capturing(
        [&] {
          auto cfg = wick::Config::load(file.string(), sets);
          line = wick::check_config(cfg, wick::PluginFinder(cfg.search_path()));
        },
        r.out, r.err);
    r.out += line + "\n";
    r.exit_code = 0;
  } catch (const wick::ConfigError& e) {
    r.exit_code = 2;
    r.err += std::string("wick: ") + e.what() + "\n";
  } catch (const wick::PluginError& e) {
    r.exit_code = 2;
    r.err += std::string("wick: ") + e.what() + "\n";
  } catch (const std::exception& e) {
    r.exit_code = 1;
    r.err += std::string("wick: error: ") + e.what() + "\n";
  } catch (...) {
    r.exit_code = 1;
    r.err += "wick: error: an exception that is not a std::exception\n";
  }
  return r;
}

std::string test_plugins_toml() {
  return std::string("[plugins]\npath = \"") + WICK_TEST_PLUGIN_DIR + "\"\n";
}

std::string idx_header(std::uint32_t magic, const std::vector<std::uint32_t>& dims) {
  std::string s;
  auto put = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xFF);
  };
  put(magic);
  for (auto d : dims) put(d);
  return s;
}

void skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(kSkipped);
}

void need_python(const std::vector<std::string>& modules) {
  std::string names;
  for (const auto& m : modules) names += (names.empty() ? "" : ", ") + m;
  // One interpreter for all: importing torch takes a second or two.
  if (run({kPython, "-c", "import " + names}).exit_code != 0)
    skip(std::string(kPython) + " cannot import " + names +
         " (scripts/install-deps.sh installs Debian's python3-torch and python3-sklearn; "
         "WICK_TEST_PYTHON names another python)");
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  return false;
}

void need_program(const std::string& program, const std::string& package) {
  if (on_path(program)) return;
  skip(program + " is not installed (Debian's " + package + "; scripts/install-deps.sh)");
}

std::set<std::string> cpu_flags() {
  std::set<std::string> flags;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      for (std::string w; words >> w;) flags.insert(w);
      break;
    }
  // WICK_CPU_DISABLE's names go, and what each implies: every AVX-512 and AMX flag with
  // avx512f (and with avx2), the AMX flags with amx_tile.
  const char* env = std::getenv("WICK_CPU_DISABLE");
  std::istringstream names(env ? env : "");
  for (std::string n; std::getline(names, n, ',');) {
    auto drop_prefix = [&](const std::string& prefix) {
      for (auto it = flags.begin(); it != flags.end();)
        it = it->rfind(prefix, 0) == 0 ? flags.erase(it) : std::next(it);
    };
    flags.erase(n);
    if (n == "avx2" || n == "avx512f") drop_prefix("avx512");
    if (n == "avx2" || n == "avx512f" || n == "amx_tile") drop_prefix("amx");
  }
  return flags;
}

}  // namespace wick::test
