// Hook scheduling: sort hook instances once, let each subscribe, record who runs where, and
// check stage-order requirements. Shared by the Trainer and `wick describe` (which builds
// the schedule without a model or data). Torch-free.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "wick/hook.hpp"
#include "wick/points.hpp"
#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

// One hook instance as the trainer schedules it.
struct HookEntry {
  std::shared_ptr<Hook> hook;
  std::string plugin;    // plugin name
  std::string instance;  // unique instance name (checkpoint key)
  int order = 0;
  bool main_process_only = false;
  std::string library;             // absolute path of the shared object ("" for in-process hooks)
  int api_minor = WICK_API_MINOR;  // the SDK minor it was built against (what it implements)
};

struct Scheduled {
  std::string instance;
  std::string plugin;
  int order;
};

struct ScheduleTable {
  std::array<std::vector<Scheduled>, kNumPoints> points;
  std::array<std::vector<Scheduled>, kNumStages> stages;
  std::vector<std::string> profiled_by;  // instances that asked for timings (request_profile)
};

// Receives the subscriptions with the hook they came from (the Trainer connects signals).
class HookSink {
 public:
  virtual ~HookSink() = default;
  virtual void on(const HookEntry& h, Point p, PointFn fn) = 0;
  virtual void stage(const HookEntry& h, Stage s, StageFn fn) = 0;
  virtual void on_record(const HookEntry& h, std::function<void(const Record&)> fn) = 0;
  virtual void on_rewind(const HookEntry& h,
                         std::function<void(const std::vector<Record>&)> fn) = 0;
  virtual void request_profile(const HookEntry& h, ProfileClock clock) = 0;
};

// Stable-sorts hooks by order (ties keep their given order), calls connect() on each (skipping
// main-process-only hooks when rank != 0), forwards subscriptions to sink (may be null) and
// fills table. Throws ConfigError when a handler that needs a capability runs before one that
// provides it in the same stage, naming the orders to use.
void connect_hooks(std::vector<HookEntry>& hooks, long rank, HookSink* sink, ScheduleTable& table);

// The Markdown schedule: every lifecycle point with its hooks ("(none)" where empty), then the
// stage chains in call order.
std::string describe_markdown(const ScheduleTable& table);

}  // namespace wick

WICK_PUBLIC_END
