// Where a run's time goes: what the profiler plugin reports (Context::profile()). The host
// times the loop's phases and every hook and stage handler once a hook has asked for it
// (Registrar::request_profile); otherwise nothing is timed and the profile is empty. On a CUDA
// device the steps and their phases are timed on the device (CUDA events): what the GPU spent
// between their start and end; hooks and handlers keep the host's clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// Since SDK 2.19: what times a CUDA run's steps and their phases (Registrar::request_profile_on).
// device: the GPU's timeline (CUDA events), what the GPU spent between a phase's start and end,
// for a step the GPU is the bound of. host: the host's clock, what the host spent queueing and
// waiting, for a step that waits for the host (a small model's, a replayed CUDA graph's); no
// event is recorded. On a CPU both are the host's clock.
enum class ProfileClock { device, host };

struct ProfileEntry {
  // "phase": a part of every training step (data, forward, loss, backward, optimizer, hooks,
  // records) or of the fit (validation); "point": one hook instance at one lifecycle point;
  // "stage": one handler of a stage chain, its own time only (the rest of the chain, which it
  // calls, is not counted in it), or the chain's "default".
  std::string kind;
  std::string name;  // "forward"; "progress @ after_step"; "grad_clip @ optimizer_step"
  std::int64_t calls = 0;
  double total_s = 0;
};

struct Profile {
  bool enabled = false;    // some hook asked for timings
  std::int64_t steps = 0;  // training steps timed
  double step_s = 0;       // their time, before_step to the end of after_step (CUDA: the device's)
  double fit_s = 0;        // since the fit started
  std::vector<ProfileEntry> entries;  // by total_s, largest first
};

// Since SDK 2.6: peak tensor memory per phase of a profiled run (Context::memory_profile).
// CPU: bytes of CPU tensors in use at the phase's peak, counted from LibTorch's CPU allocator
// (the model's tensors at the fit's start included; tensors made on other threads, such as
// data-loader batches, not); CUDA: the CUDA caching allocator's allocated bytes at the peak
// (0 on a CPU run). A phase inside another (a manual task's backward inside its forward)
// counts in both.
struct MemoryPhase {
  std::string name;  // a phase of ProfileEntry's: "forward", "backward", "optimizer", ...
  std::int64_t calls = 0;
  std::int64_t cpu_peak_bytes = 0;
  std::int64_t cuda_peak_bytes = 0;
};
struct MemoryProfile {
  bool enabled = false;  // some hook asked for a profile
  std::vector<MemoryPhase> phases;
  std::int64_t peak_rss_bytes = 0;  // the process's peak resident set (VmHWM), whole run
};
// A row per phase (MiB), then the peak resident set.
WICK_EXPORT std::string memory_table(const MemoryProfile& m);
// {"peak_rss_bytes", "phases": [{"name", "calls", "cpu_peak_bytes", "cuda_peak_bytes"}, ...]}:
// "memory" in summary.json.
WICK_EXPORT std::string memory_json(const MemoryProfile& m);

// The table the profiler prints: a row per entry (kind, name, calls, total s, mean ms, % of
// the steps' time; at most max_rows rows, 0: all), then the phases' sum against the step time.
WICK_EXPORT std::string profile_table(const Profile& p, std::size_t max_rows = 0);
// {"steps", "step_s", "fit_s", "phases_s", "entries": [{"kind", "name", "calls", "total_s",
// "mean_ms"}, ...]}: profile.json, and "profile" in summary.json.
WICK_EXPORT std::string profile_json(const Profile& p);
// The sum of the step phases (kind "phase" but validation): compare with step_s.
WICK_EXPORT double phases_seconds(const Profile& p);

}  // namespace wick

WICK_PUBLIC_END
