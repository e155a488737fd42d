#include "loop/profiler.hpp"

#include <algorithm>
#include <iterator>

namespace wick {

namespace {
const char* const kPhaseNames[Profiler::kNumPhases] = {
    "data", "forward", "loss", "backward", "optimizer", "hooks", "records", "validation"};
}

Profiler::Profiler(ProfileClock clock)
    : memory({std::begin(kPhaseNames), std::end(kPhaseNames)}), clock_kind_(clock) {
  for (const char* n : kPhaseNames) add_entry("phase", n);
}

std::size_t Profiler::add_entry(std::string kind, std::string name) {
  entries_.push_back({std::move(kind), std::move(name), 0, 0.0});
  return entries_.size() - 1;
}

Profiler::StepStart Profiler::step_start() {
  StepStart s;
  s.host = Clock::now();
  if (clock_) s.mark = clock_->mark();
  return s;
}

void Profiler::add_step(const StepStart& start) {
  ++steps_;
  if (!clock_) {
    step_s_ += since(start.host);
    return;
  }
  spans_.push_back({kStepId, start.mark, clock_->mark(), kNone, true});
  // The marks are read in batches: a wait for the device every few hundred steps.
  if (spans_.size() >= 4096) settle();
}

std::size_t Profiler::open_span(std::size_t id) {
  spans_.push_back({id, clock_->mark(), 0, open_});
  open_ = spans_.size() - 1;
  return open_;
}

void Profiler::close_span(std::size_t span, bool counted) {
  auto& s = spans_[span];
  s.to = clock_->mark();
  s.counted = counted;
  open_ = s.parent;
}

void Profiler::settle() {
  if (!clock_ || open_ != kNone) return;  // inside a phase: later
  // A phase's own time is its span less the spans of the phases inside it, which come after
  // it: read backwards, each span adds itself to its parent's.
  std::vector<double> inner(spans_.size(), 0.0);
  for (std::size_t i = spans_.size(); i-- > 0;) {
    const Span& s = spans_[i];
    const double elapsed = clock_->seconds(s.from, s.to);
    if (s.id == kStepId) {
      step_s_ += elapsed;
      continue;
    }
    if (s.counted) add(s.id, elapsed - inner[i]);
    if (s.parent != kNone) inner[s.parent] += elapsed;
  }
  spans_.clear();
  clock_->clear();
}

Profile Profiler::snapshot(double fit_s) {
  settle();
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
