// The profile and the memory profile as text and JSON (wick/profile.hpp): the profiler plugin
// prints and writes it, summary.json embeds it.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "wick/profile.hpp"

namespace wick {

namespace {
double mean_ms(const ProfileEntry& e) {
  return e.calls ? 1e3 * e.total_s / static_cast<double>(e.calls) : 0.0;
}
}  // namespace

double phases_seconds(const Profile& p) {
  double s = 0;
  for (const auto& e : p.entries)
    if (e.kind == "phase" && e.name != "validation") s += e.total_s;
  return s;
}

std::string profile_table(const Profile& p, std::size_t max_rows) {
  std::size_t w_name = 4;
  for (const auto& e : p.entries) w_name = std::max(w_name, e.name.size());
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-6s %-*s %10s %10s %10s %7s\n", "kind",
                static_cast<int>(w_name), "name", "calls", "total s", "mean ms", "% step");
  out += line;
  std::size_t rows = 0;
  for (const auto& e : p.entries) {
    if (e.calls == 0) continue;  // subscribed, never reached (the profiler's own report)
    if (max_rows && rows++ >= max_rows) break;
    const double pct = p.step_s > 0 ? 100.0 * e.total_s / p.step_s : 0.0;
    std::snprintf(line, sizeof line, "%-6s %-*s %10lld %10.3f %10.4f %7.1f\n", e.kind.c_str(),
                  static_cast<int>(w_name), e.name.c_str(), static_cast<long long>(e.calls),
                  e.total_s, mean_ms(e), pct);
    out += line;
  }
  const double phases = phases_seconds(p);
  std::snprintf(line, sizeof line,
                "%lld training steps: %.3f s (%.4f ms each); their phases sum to %.3f s (%.1f%%); "
                "fit %.3f s\n",
                static_cast<long long>(p.steps), p.step_s,
                p.steps ? 1e3 * p.step_s / static_cast<double>(p.steps) : 0.0, phases,
                p.step_s > 0 ? 100.0 * phases / p.step_s : 0.0, p.fit_s);
  out += line;
  return out;
}

std::string profile_json(const Profile& p) {
  nlohmann::ordered_json j;
  j["steps"] = p.steps;
  j["step_s"] = p.step_s;
  j["fit_s"] = p.fit_s;
  j["phases_s"] = phases_seconds(p);
  auto rows = nlohmann::ordered_json::array();
  for (const auto& e : p.entries) {
    nlohmann::ordered_json r;
    r["kind"] = e.kind;
    r["name"] = e.name;
    r["calls"] = e.calls;
    r["total_s"] = e.total_s;
    r["mean_ms"] = mean_ms(e);
    rows.push_back(std::move(r));
  }
  j["entries"] = std::move(rows);
  return j.dump(2);
}

std::string memory_table(const MemoryProfile& m) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %10s %14s %14s\n", "phase", "calls", "CPU peak MiB",
                "CUDA peak MiB");
  out += line;
  constexpr double kMiB = 1024.0 * 1024.0;
  for (const auto& p : m.phases) {
    std::snprintf(line, sizeof line, "%-12s %10lld %14.1f %14.1f\n", p.name.c_str(),
                  static_cast<long long>(p.calls), static_cast<double>(p.cpu_peak_bytes) / kMiB,
                  static_cast<double>(p.cuda_peak_bytes) / kMiB);
    out += line;
  }
  std::snprintf(line, sizeof line, "peak resident set of the process: %.1f MiB\n",
                static_cast<double>(m.peak_rss_bytes) / kMiB);
  out += line;
  return out;
}

std::string memory_json(const MemoryProfile& m) {
  nlohmann::ordered_json j;
  j["peak_rss_bytes"] = m.peak_rss_bytes;
  auto rows = nlohmann::ordered_json::array();
  for (const auto& p : m.phases)
    rows.push_back({{"name", p.name},
                    {"calls", p.calls},
                    {"cpu_peak_bytes", p.cpu_peak_bytes},
                    {"cuda_peak_bytes", p.cuda_peak_bytes}});
  j["phases"] = std::move(rows);
  return j.dump(2);
}

}  // namespace wick
