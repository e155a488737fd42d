#include "common.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace wick::bench {

namespace fs = std::filesystem;

json Stats::to_json() const {
  return {
      {"median", median}, {"min", min}, {"max", max}, {"spread", spread()}, {"samples", samples}};
}

Stats make_stats(std::vector<double> v) {
  Stats s;
  s.samples = v;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChildResult run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  // Streams go to files rather than pipes: nothing to drain while the child runs, so the
  // parent does no work that could disturb the child's timing.
  char tmpl[] = "/tmp/wick_bench_child_XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  const fs::path dir(tmpl);
  const std::string out_path = (dir / "out").string(), err_path = (dir / "err").string();

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (o < 0 || e < 0) _exit(127);
    dup2(o, 1);
    dup2(e, 2);
    for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
    execv(args[0], args.data());
    std::perror(args[0]);
    _exit(127);
  }
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) < 0) throw std::runtime_error("wait4 failed");
  ChildResult r;
  r.wall_s = seconds_since(t0);
  r.max_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

double self_peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0;
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string find_in_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  const std::string p = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= p.size()) {
    auto end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    const fs::path cand = fs::path(p.substr(start, end - start)) / prog;
    if (!cand.empty() && access(cand.c_str(), X_OK) == 0) return cand.string();
    start = end + 1;
  }
  return {};
}

std::map<std::string, double> read_callgrind_dumps(const std::string& dir) {
  // Each client-request dump is its own file with a "desc: Trigger: Client Request: LABEL"
  // line and a "totals:" (or "summary:") line whose first number is Ir.
  std::map<std::string, double> ir;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::ifstream in(e.path());
    std::string line, label;
    double total = -1;
    const std::string trig = "desc: Trigger: Client Request: ";
    while (std::getline(in, line)) {
      if (line.rfind(trig, 0) == 0) label = line.substr(trig.size());
      if (line.rfind("totals:", 0) == 0 || (total < 0 && line.rfind("summary:", 0) == 0))
        total = std::atof(line.c_str() + line.find(':') + 1);
    }
    if (!label.empty() && total >= 0) ir[label] = total;
  }
  return ir;
}

WickRun read_summary(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "summary.json");
  if (!in) throw std::runtime_error("no summary.json in " + dir);
  json j = json::parse(in);
  if (j.value("status", "") != "completed")
    throw std::runtime_error("wick run did not complete: " + j.dump());
  WickRun r;
  r.samples_per_s = j.at("train_samples_per_s").get<double>();
  r.samples = j.at("samples_seen").get<std::int64_t>();
  const double cpu = j.value("train_cpu_s", 0.0);
  r.cpu_samples_per_s = cpu > 0 ? static_cast<double>(r.samples) / cpu : 0;
  r.fingerprint = j.value("model_fingerprint", "");
  return r;
}

}  // namespace wick::bench
