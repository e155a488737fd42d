#include "loop/profiler.hpp"

#include <algorithm>
#include <iterator>

namespace wick {

namespace {
const char* const kPhaseNames[Profiler::kNumPhases] = {
    "data", "forward", "loss", "backward", "optimizer", "hooks", "records", "validation"};
}

Profiler::Profiler() : memory({std::begin(kPhaseNames), std::end(kPhaseNames)}) {
  for (const char* n : kPhaseNames) add_entry("phase", n);
}

std::size_t Profiler::add_entry(std::string kind, std::string name) {
  entries_.push_back({std::move(kind), std::move(name), 0, 0.0});
  return entries_.size() - 1;
}

Profile Profiler::snapshot(double fit_s) const {
  Profile p;
  p.enabled = true;
  p.steps = steps_;
  p.step_s = step_s_;
  p.fit_s = fit_s;
  p.entries = entries_;
  std::stable_sort(
      p.entries.begin(), p.entries.end(),
      [](const ProfileEntry& a, const ProfileEntry& b) { return a.total_s > b.total_s; });
  return p;
}

}  // namespace wick
