// trainer.threads = "auto": how many intra-op threads a run takes, from the cores that are free
// when it starts.
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "wick/system.hpp"

namespace wick {

namespace {

struct CpuTimes {
  double idle = 0, total = 0;
};

// Each allowed core's idle and total ticks from /proc/stat (index: the core's number).
std::vector<CpuTimes> read_cpu_times(const cpu_set_t& allowed) {
  std::vector<CpuTimes> out;
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(line[3])) continue;
    std::istringstream s(line.substr(3));
    int cpu = 0;
    s >> cpu;
    // user nice system idle iowait irq softirq steal (guest time is counted in user already).
    double v[8] = {};
    for (double& x : v) s >> x;
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) continue;
    if (out.size() <= static_cast<std::size_t>(cpu)) out.resize(static_cast<std::size_t>(cpu) + 1);
    auto& t = out[static_cast<std::size_t>(cpu)];
    t.idle = v[3] + v[4];
    for (double x : v) t.total += x;
  }
  return out;
}

// The cgroup (v2) CPU quota in cores, e.g. 2.0 for "200000 100000"; 0 when unlimited or unknown.
double cgroup_quota_cores() {
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  return std::strtod(quota.c_str(), nullptr) / period;
}

}  // namespace

CoreSample sample_free_cores(double seconds) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  CoreSample s;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    s.allowed = static_cast<int>(std::thread::hardware_concurrency());
    s.free = s.allowed;
    return s;
  }
  s.allowed = CPU_COUNT(&allowed);
  if (const double quota = cgroup_quota_cores(); quota > 0 && quota < s.allowed)
    s.allowed = std::max(1, static_cast<int>(std::ceil(quota)));
  const auto before = read_cpu_times(allowed);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const auto after = read_cpu_times(allowed);
  if (before.empty() || before.size() != after.size()) {
    s.free = s.allowed;  // no /proc/stat: as if idle
    return s;
  }
  double free = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const double total = after[i].total - before[i].total;
    if (total > 0) free += (after[i].idle - before[i].idle) / total;
  }
  s.free = std::min(free, static_cast<double>(s.allowed));
  return s;
}

int choose_threads(const CoreSample& cores, int local_ranks) {
  const int ranks = std::max(1, local_ranks);
  const int share = std::max(1, cores.allowed / ranks);
  // A core counts once at least three quarters of it was idle: a thread on a half-busy core
  // holds every parallel region back to the other process's time slices.
  const int free = static_cast<int>(std::floor(cores.free / ranks + 0.25));
  return std::clamp(free, 1, share);
}

int auto_threads(std::string* why) {
  std::string ignored;
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && *omp) {
    // "4" or a nested list "4,2": the outer level's count.
    char* end = nullptr;
    const long n = std::strtol(omp, &end, 10);
    if (n >= 1 && n <= 1024 && (*end == '\0' || *end == ',')) {
      if (why) *why = "OMP_NUM_THREADS";
      return static_cast<int>(n);
    }
    // Said, not dropped silently: the user meant some count.
    ignored = std::string(omp).substr(0, 40);
    std::fprintf(stderr,
                 "wick: warning: OMP_NUM_THREADS=%s is not a thread count from 1 to 1024; "
                 "ignored, the count is chosen from the free cores\n",
                 ignored.c_str());
  }
  int ranks = 1;
  if (const char* l = std::getenv("LOCAL_WORLD_SIZE"); l && *l) ranks = std::max(1, std::atoi(l));
  const auto cores = sample_free_cores();
  if (why) {
    std::ostringstream w;
    w.precision(2);
    w << std::fixed << cores.free << " of " << cores.allowed << " cores free";
    if (ranks > 1) w << ", " << ranks << " ranks on this machine";
    if (!ignored.empty()) w << " (OMP_NUM_THREADS=" << ignored << " ignored)";
    *why = w.str();
  }
  return choose_threads(cores, ranks);
}

}  // namespace wick
