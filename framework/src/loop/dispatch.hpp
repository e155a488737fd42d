// Private: the dispatcher of lifecycle points and stage chains. One Boost.Signals2 signal per
// point, slots grouped by order; one chain of handlers per stage, ending in a default. It
// records whose code runs, so that an error names its plugin and point.
#pragma once

#include <array>
#include <boost/signals2.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loop/loop_events.hpp"
#include "loop/profiler.hpp"
#include "wick/context.hpp"
#include "wick/hook.hpp"
#include "wick/schedule.hpp"

namespace wick {

// Calls the slots in order and, before each, notes whose hook it is (for error messages).
// With keep_going (after_cancel, the clean-up on the way out: a cancel checkpoint, files
// closed) a slot that throws does not keep the later ones from running: the first error is
// rethrown after them, with its hook noted as the one running.
struct BlameCombiner {
  using result_type = void;
  const HookEntry** current = nullptr;
  const HookEntry* const* hooks = nullptr;  // the hook of each slot, in call order
  bool keep_going = false;
  template <class It>
  void operator()(It first, It last) const {
    std::exception_ptr error;
    const HookEntry* thrower = nullptr;
    for (std::size_t k = 0; first != last; ++first, ++k) {
      *current = hooks[k];
      if (!keep_going) {
        *first;
        continue;
      }
      try {
        *first;
      } catch (...) {
        if (!error) error = std::current_exception(), thrower = hooks[k];
      }
    }
    if (error) {
      *current = thrower;
      std::rethrow_exception(error);
    }
  }
};

struct Next::Chain {
  std::vector<StageFn> handlers;
  std::function<bool(Context&)> terminal;
  // Which run of the chain each position (the handlers, then the terminal) was last entered
  // in, so that a handler calling next() twice is caught: the rest would run twice.
  mutable std::vector<std::uint64_t> entered;
  mutable std::uint64_t run = 0, runs = 0;
};

class Dispatcher {
 public:
  explicit Dispatcher(Context& ctx) : ctx_(ctx) {}
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  void add_hook(HookEntry entry);
  const std::vector<HookEntry>& hooks() const { return hooks_; }
  // Sorts hooks once, connects their points and handlers (main-process-only hooks on rank 0
  // only), checks capability order. Throws ConfigError on an impossible order.
  void connect(std::int64_t rank);
  // For evaluation on a trainer that will not fit: only the hooks' forward stage handlers
  // (autocast, an input layout), which a fit's validation runs; their points, records and
  // other stages are dropped. connect() after it throws.
  void connect_forward(std::int64_t rank);
  bool connected() const { return connected_; }
  bool evaluation_only() const { return forward_only_; }
  // The run's timings when a hook asked for them (Registrar::request_profile) at connect;
  // else null, and nothing is timed.
  Profiler* profiler() const { return profiler_.get(); }
  const ScheduleTable& table() const { return table_; }

  // The default at the end of stage s; it runs on no plugin's behalf.
  void set_terminal(Stage s, std::function<bool(Context&)> fn);

  void emit(Point p) {
    const auto i = static_cast<std::size_t>(p);
    // A point nobody subscribed to costs one test (Signals2's empty emit is not free).
    if (blame_order_[i].empty()) return;
    where_ = to_string(p);
    signals_[i](ctx_);
    current_ = nullptr;
  }
  bool run_stage(Stage s);

  // Where the loop is, for messages: static strings only (set often, never copied).
  void set_where(std::string_view w) {
    where_ = w;
    current_ = nullptr;
  }
  std::string_view where() const { return where_; }
  // The hook whose code runs now (null: the loop's own, or the task's).
  const HookEntry* running() const { return current_; }
  // After emit(p) threw: whether slots after the one that threw were left unrun.
  bool left_unrun(Point p) const {
    const auto& order = blame_order_[static_cast<std::size_t>(p)];
    return current_ && !order.empty() && current_ != order.back();
  }
  // "plugin 'x' (instance 'y') at POINT: what", or "POINT: what" when no hook was running.
  std::string blame(const std::string& what) const;

  const std::vector<std::function<void(const Record&)>>& record_sinks() const { return sinks_; }
  const std::vector<std::function<void(const std::vector<Record>&)>>& rewinds() const {
    return rewinds_;
  }
  // Hooks with checkpoint state, by instance name.
  std::vector<std::pair<std::string, Hook*>> stateful_hooks() const;

 private:
  class Sink;
  // Subscriptions as connect_hooks hands them over; wired (timed or not) once every hook has
  // connected, since any of them may ask for timings.
  struct PendingPoint {
    const HookEntry* hook;
    Point point;
    PointFn fn;
  };
  struct PendingStage {
    const HookEntry* hook;
    Stage stage;
    StageFn fn;
  };
  void wire(std::vector<PendingPoint> points, std::vector<PendingStage> stages);
  using Signal = boost::signals2::signal_type<
      void(Context&), boost::signals2::keywords::mutex_type<boost::signals2::dummy_mutex>,
      boost::signals2::keywords::group_type<int>,
      boost::signals2::keywords::combiner_type<BlameCombiner>>::type;

  Context& ctx_;
  std::vector<HookEntry> hooks_;
  bool connected_ = false, forward_only_ = false;
  // The loop is single-threaded per process, so the signals need no mutex (measured faster).
  std::array<Signal, kNumPoints> signals_;
  std::array<std::vector<const HookEntry*>, kNumPoints> blame_order_;
  std::array<Next::Chain, kNumStages> chains_;
  ScheduleTable table_;
  std::vector<std::function<void(const Record&)>> sinks_;
  std::vector<std::function<void(const std::vector<Record>&)>> rewinds_;
  const HookEntry* current_ = nullptr;
  std::string_view where_ = "start";
  std::unique_ptr<Profiler> profiler_;
  std::array<std::size_t, kNumStages> default_ids_{};  // the chains' defaults in profiler_
};

// The dispatcher as the loop's components see it (loop_events.hpp).
class DispatcherPort final : public StageRunner {
 public:
  explicit DispatcherPort(Dispatcher& d) : d_(d) {}
  void emit(Point p) override { d_.emit(p); }
  void set_where(std::string_view where) override { d_.set_where(where); }
  void set_terminal(Stage s, std::function<bool(Context&)> fn) override {
    d_.set_terminal(s, std::move(fn));
  }
  bool run_stage(Stage s) override { return d_.run_stage(s); }
  Profiler* profiler() const override { return d_.profiler(); }
  bool left_unrun(Point p) const override { return d_.left_unrun(p); }

 private:
  Dispatcher& d_;
};

}  // namespace wick
