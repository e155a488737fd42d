#include "loop/dispatch.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "system/error_text.hpp"
#include "wick/hook.hpp"  // Cancel
#include "wick/params.hpp"

namespace wick {

bool Next::operator()() const {
  auto& entered = chain_->entered;
  if (entered.size() <= chain_->handlers.size()) entered.resize(chain_->handlers.size() + 1, 0);
  if (entered[index_] == chain_->run)
    throw std::logic_error(
        "a stage handler called next() twice in one run of its stage: the rest of the chain "
        "and the stage's default would run twice (an optimizer step taken twice); call it once");
  entered[index_] = chain_->run;
  if (index_ < chain_->handlers.size())
    return chain_->handlers[index_](*ctx_, Next(chain_, index_ + 1, ctx_));
  return chain_->terminal(*ctx_);
}

namespace {
// Runs a hook's record sink or rewind: what it throws names the hook, keeping its kind (a
// cancel stays a cancel, a config error exits 2).
template <class Fn>
void as_hook(const HookEntry& h, const char* doing, Fn&& fn) {
  const auto named = [&](const std::string& what) {
    return "plugin '" + h.plugin + "' (instance '" + h.instance + "') " + doing + ": " + what;
  };
  try {
    fn();
  } catch (const Cancel&) {
    throw;
  } catch (const ConfigError& e) {
    throw ConfigError(named(e.what()));
  } catch (const std::exception& e) {
    throw std::runtime_error(named(e.what()));
  } catch (...) {
    throw std::runtime_error(named("an exception that is not a std::exception"));
  }
}
}  // namespace

// Collects a hook's subscriptions for wire(), which connects them to the signals and chains,
// each stage handler wrapped so that an exception can be blamed on the hook that threw it.
class Dispatcher::Sink : public HookSink {
 public:
  explicit Sink(Dispatcher& d, bool forward_only = false) : forward_only_(forward_only), d_(d) {}
  void on(const HookEntry& h, Point p, PointFn fn) override {
    if (!forward_only_) points.push_back({&h, p, std::move(fn)});
  }
  void stage(const HookEntry& h, Stage s, StageFn fn) override {
    if (!forward_only_ || s == Stage::forward) stages.push_back({&h, s, std::move(fn)});
  }
  // A sink runs where the trainer writes a record, not in a handler of its hook: its errors
  // (a file it cannot write) name the hook here.
  void on_record(const HookEntry& h, std::function<void(const Record&)> fn) override {
    if (forward_only_) return;
    d_.sinks_.push_back([&h, fn = std::move(fn)](const Record& r) {
      as_hook(h, "writing a record", [&] { fn(r); });
    });
  }
  void on_rewind(const HookEntry& h, std::function<void(const std::vector<Record>&)> fn) override {
    if (forward_only_) return;
    d_.rewinds_.push_back([&h, fn = std::move(fn)](const std::vector<Record>& kept) {
      as_hook(h, "rewinding its records to the checkpoint", [&] { fn(kept); });
    });
  }
  void request_profile(const HookEntry&, ProfileClock c) override {
    if (forward_only_) return;
    profile = true;
    if (c == ProfileClock::host) clock = c;
  }

  std::vector<PendingPoint> points;
  std::vector<PendingStage> stages;
  bool profile = false;
  ProfileClock clock = ProfileClock::device;

 private:
  bool forward_only_;
  Dispatcher& d_;
};

Dispatcher::~Dispatcher() {
  // Disconnect every slot before the hooks (whose code the slots run) go away.
  for (auto& s : signals_) s.disconnect_all_slots();
  for (auto& c : chains_) c.handlers.clear();
  sinks_.clear();
  rewinds_.clear();
}

void Dispatcher::add_hook(HookEntry entry) {
  if (connected_) throw std::logic_error("add_hook after connect");
  for (const auto& h : hooks_)
    if (h.instance == entry.instance)
      throw ConfigError("two hooks named '" + entry.instance +
                        "'; give one of them another name with name = \"...\"");
  hooks_.push_back(std::move(entry));
}

void Dispatcher::connect(std::int64_t rank) {
  if (forward_only_)
    throw std::logic_error(
        "a trainer connected for evaluation only (connect_for_evaluation) cannot connect its "
        "hooks for a fit, a validation or a schedule; make another Trainer");
  if (connected_) return;
  Sink sink(*this);
  connect_hooks(hooks_, rank, &sink, table_);
  if (sink.profile) {
    profiler_ = std::make_unique<Profiler>(sink.clock);
    for (std::size_t s = 0; s < kNumStages; ++s)
      default_ids_[s] = profiler_->add_entry(
          "stage", "default @ " + std::string(to_string(static_cast<Stage>(s))));
  }
  wire(std::move(sink.points), std::move(sink.stages));
  connected_ = true;
}

void Dispatcher::connect_forward(std::int64_t rank) {
  if (connected_) return;
  Sink sink(*this, /*forward_only=*/true);
  ScheduleTable unused;  // the schedule is a fit's
  connect_hooks(hooks_, rank, &sink, unused);
  wire({}, std::move(sink.stages));
  connected_ = forward_only_ = true;
}

void Dispatcher::wire(std::vector<PendingPoint> points, std::vector<PendingStage> stages) {
  Profiler* prof = profiler_.get();
  for (auto& p : points) {
    // In hook order; within a group Signals2 keeps connection order, so the slots run in the
    // order of blame_order.
    const auto i = static_cast<std::size_t>(p.point);
    PointFn fn = std::move(p.fn);
    if (prof) {
      const std::size_t id =
          prof->add_entry("point", p.hook->instance + " @ " + std::string(to_string(p.point)));
      fn = [prof, id, fn = std::move(fn)](Context& c) {
        const auto t0 = Profiler::Clock::now();
        fn(c);
        prof->add(id, Profiler::since(t0));
      };
    }
    signals_[i].connect(p.hook->order, std::move(fn), boost::signals2::at_back);
    blame_order_[i].push_back(p.hook);
    signals_[i].set_combiner(BlameCombiner{&current_, blame_order_[i].data(),
                                           static_cast<Point>(i) == Point::after_cancel});
  }
  for (auto& s : stages) {
    const HookEntry* entry = s.hook;
    auto& handlers = chains_[static_cast<std::size_t>(s.stage)].handlers;
    if (!prof) {
      handlers.push_back([this, entry, fn = std::move(s.fn)](Context& c, Next n) {
        // Handlers nest: when this one returns, an error belongs to its caller again.
        const HookEntry* caller = current_;
        current_ = entry;
        bool r = fn(c, n);
        current_ = caller;
        return r;
      });
      continue;
    }
    const std::size_t id =
        prof->add_entry("stage", entry->instance + " @ " + std::string(to_string(s.stage)));
    handlers.push_back([this, prof, id, entry, fn = std::move(s.fn)](Context& c, Next n) {
      const HookEntry* caller = current_;
      current_ = entry;
      const double outer = prof->nested_s;
      prof->nested_s = 0;
      const auto t0 = Profiler::Clock::now();
      bool r = fn(c, n);
      const double elapsed = Profiler::since(t0);
      prof->add(id, elapsed - prof->nested_s);  // its own time: less the rest of the chain
      prof->nested_s = outer + elapsed;
      current_ = caller;
      return r;
    });
  }
}

void Dispatcher::set_terminal(Stage s, std::function<bool(Context&)> fn) {
  chains_[static_cast<std::size_t>(s)].terminal = [this, s, fn = std::move(fn)](Context& c) {
    // Runs on no plugin's behalf; once it returns, an error is the calling handler's again.
    const HookEntry* caller = current_;
    current_ = nullptr;
    if (!profiler_) {
      const bool r = fn(c);
      current_ = caller;
      return r;
    }
    // A default may run other stages (gradients runs forward and backward): its own time is
    // its elapsed time less theirs.
    const double outer = profiler_->nested_s;
    profiler_->nested_s = 0;
    const auto t0 = Profiler::Clock::now();
    bool r = fn(c);
    const double elapsed = Profiler::since(t0);
    profiler_->add(default_ids_[static_cast<std::size_t>(s)], elapsed - profiler_->nested_s);
    profiler_->nested_s = outer + elapsed;
    current_ = caller;
    return r;
  };
}

bool Dispatcher::run_stage(Stage s) {
  const auto& chain = chains_[static_cast<std::size_t>(s)];
  where_ = to_string(s);
  // This run's number while it lasts; a run of the stage nested in it gets its own.
  struct RunNumber {
    const Next::Chain& c;
    std::uint64_t outer;
    ~RunNumber() { c.run = outer; }
  } number{chain, chain.run};
  chain.run = ++chain.runs;
  if (!profiler_) {
    bool r = Next(&chain, 0, &ctx_)();
    current_ = nullptr;
    return r;
  }
  // The whole chain is nested time for a handler or default that runs this stage inside its
  // own (gradients); a chain an exception cut short leaves nested_s for the next to reset.
  const double outer = profiler_->nested_s;
  profiler_->nested_s = 0;
  const auto t0 = Profiler::Clock::now();
  bool r = Next(&chain, 0, &ctx_)();
  profiler_->nested_s = outer + Profiler::since(t0);
  current_ = nullptr;
  return r;
}

std::string Dispatcher::blame(const std::string& what) const {
  if (current_)
    return "plugin '" + current_->plugin + "' (instance '" + current_->instance + "') at " +
           std::string(where_) + ": " + without_backtraces(what);
  return std::string(where_) + ": " + without_backtraces(what);
}

std::vector<std::pair<std::string, Hook*>> Dispatcher::stateful_hooks() const {
  std::vector<std::pair<std::string, Hook*>> out;
  for (const auto& h : hooks_)
    if (h.hook->has_state()) out.emplace_back(h.instance, h.hook.get());
  return out;
}

}  // namespace wick
