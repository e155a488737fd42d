#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

#include "system/error_text.hpp"
#include "wick/config.hpp"
#include "wick/data_parallel.hpp"
#include "wick/params.hpp"
#include "wick/schedule.hpp"

namespace wick {

namespace {

// A capability a hook's handler provides or needs in a stage.
struct CapabilityUse {
  Stage stage;
  const HookEntry* entry;
  std::string name;
  std::string why;  // needs only
};

class RecordingRegistrar : public Registrar {
 public:
  RecordingRegistrar(const HookEntry& h, HookSink* sink, ScheduleTable& t,
                     std::vector<CapabilityUse>& provided, std::vector<CapabilityUse>& needed)
      : h_(h), sink_(sink), t_(t), provided_(provided), needed_(needed) {}
  void on(Point p, PointFn fn) override {
    t_.points[static_cast<std::size_t>(p)].push_back({h_.instance, h_.plugin, h_.order});
    if (sink_) sink_->on(h_, p, std::move(fn));
  }
  void stage(Stage s, StageFn fn) override {
    t_.stages[static_cast<std::size_t>(s)].push_back({h_.instance, h_.plugin, h_.order});
    if (sink_) sink_->stage(h_, s, std::move(fn));
  }
  void provides(Stage s, const std::string& capability) override {
    provided_.push_back({s, &h_, capability, {}});
  }
  void needs(Stage s, const std::string& capability, const std::string& why) override {
    needed_.push_back({s, &h_, capability, why});
  }
  void on_record(std::function<void(const Record&)> fn) override {
    if (sink_) sink_->on_record(h_, std::move(fn));
  }
  void on_rewind(std::function<void(const std::vector<Record>&)> fn) override {
    if (sink_) sink_->on_rewind(h_, std::move(fn));
  }
  void request_profile() override { request_profile_on(ProfileClock::device); }
  void request_profile_on(ProfileClock clock) override {
    t_.profiled_by.push_back(h_.instance);
    if (sink_) sink_->request_profile(h_, clock);
  }

 private:
  const HookEntry& h_;
  HookSink* sink_;
  ScheduleTable& t_;
  std::vector<CapabilityUse>& provided_;
  std::vector<CapabilityUse>& needed_;
};

// A name that is not a built-in capability but a letter or two from one is a misspelling: a
// need nobody provides would hold silently, a provide would order nothing. A plugin's own
// names (far from the built-in ones) pass.
void check_capability_names(const std::vector<CapabilityUse>& uses, const char* verb) {
  std::vector<std::string> known;
  for (const Capability c : kCapabilities) known.emplace_back(to_string(c));
  for (const auto& u : uses) {
    if (std::find(known.begin(), known.end(), u.name) != known.end()) continue;
    const std::string near = did_you_mean(u.name, known);
    if (near.empty()) continue;
    throw ConfigError("hook '" + u.entry->instance + "' (plugin '" + u.entry->plugin + "') " +
                      verb + " '" + u.name + "' in the " + std::string(to_string(u.stage)) +
                      " stage, which is not a capability; did you mean '" + near +
                      "'? (wick::Capability::" + near + " in the plugin's connect())");
  }
}

}  // namespace

void connect_hooks(std::vector<HookEntry>& hooks, long rank, HookSink* sink, ScheduleTable& table) {
  std::stable_sort(hooks.begin(), hooks.end(),
                   [](const HookEntry& a, const HookEntry& b) { return a.order < b.order; });
  // Two data-parallel strategies would both rendezvous and reduce: one run has one.
  const HookEntry* strategy = nullptr;
  for (const auto& h : hooks) {
    if (!dynamic_cast<const DataParallelStrategy*>(h.hook.get())) continue;
    if (strategy)
      throw ConfigError("hooks '" + strategy->instance + "' and '" + h.instance +
                        "' are both data-parallel strategies; enable one of them");
    strategy = &h;
  }
  std::vector<CapabilityUse> provided, needed;
  for (const auto& h : hooks) {
    if (h.main_process_only && rank != 0) continue;
    RecordingRegistrar r(h, sink, table, provided, needed);
    // Start-up's step where each hook says what it handles: an error names the plugin and
    // the instance, not only what the plugin said.
    const std::string who =
        h.plugin == "task" ? std::string("the task")
                           : "plugin '" + h.plugin + "'" +
                                 (h.instance == h.plugin ? "" : " (instance '" + h.instance + "')");
    const std::string where = who + " failed in connect(), at start while its hooks were wired: ";
    try {
      h.hook->connect(r);
    } catch (const ConfigError& e) {
      throw ConfigError(where + without_backtraces(e.what()));
    } catch (const std::exception& e) {
      throw std::runtime_error(where + without_backtraces(e.what()));
    } catch (...) {
      throw std::runtime_error(where + "an exception that is not a std::exception");
    }
  }
  check_capability_names(provided, "provides");
  check_capability_names(needed, "needs");
  // Position of an instance in a stage's chain (call order), -1 when it has no handler there.
  auto position = [&](Stage s, const HookEntry* e) {
    const auto& chain = table.stages[static_cast<std::size_t>(s)];
    for (std::size_t k = 0; k < chain.size(); ++k)
      if (chain[k].instance == e->instance) return static_cast<int>(k);
    return -1;
  };
  for (const auto& need : needed) {
    const int mine = position(need.stage, need.entry);
    for (const auto& prov : provided) {
      if (prov.stage != need.stage || prov.name != need.name || prov.entry == need.entry) continue;
      const int theirs = position(prov.stage, prov.entry);
      if (mine < 0 || theirs < 0 || mine > theirs) continue;
      // Suggest an order after every provider of everything this instance needs here.
      int after = prov.entry->order;
      for (const auto& n2 : needed)
        if (n2.entry == need.entry && n2.stage == need.stage)
          for (const auto& p2 : provided)
            if (p2.stage == n2.stage && p2.name == n2.name && p2.entry != need.entry)
              after = std::max(after, p2.entry->order);
      throw ConfigError("hook '" + need.entry->instance + "' (order " +
                        std::to_string(need.entry->order) + ") runs before '" +
                        prov.entry->instance + "' (order " + std::to_string(prov.entry->order) +
                        ") in the " + std::string(to_string(need.stage)) + " stage, but it needs " +
                        need.name + ", which '" + prov.entry->instance + "' provides (" + need.why +
                        "); give '" + need.entry->instance + "' an order greater than " +
                        std::to_string(after) + " (e.g. order = " + std::to_string(after + 1) +
                        " in its [[hooks]] table)");
    }
  }
}

std::string describe_markdown(const ScheduleTable& t) {
  // Column widths from the content, so the table reads well as plain text too.
  std::size_t w_point = std::string("Lifecycle Point").size(), w_hook = 6, w_order = 5;
  for (std::size_t i = 0; i < kNumPoints; ++i) {
    w_point = std::max(w_point, to_string(static_cast<Point>(i)).size());
    for (const auto& s : t.points[i]) {
      w_hook = std::max(w_hook, s.instance.size());
      w_order = std::max(w_order, std::to_string(s.order).size());
    }
  }
  auto pad = [](const std::string& s, std::size_t w) { return s + std::string(w - s.size(), ' '); };
  auto rpad = [](const std::string& s, std::size_t w) {
    return std::string(w - s.size(), ' ') + s;
  };
  std::ostringstream o;
  o << "| " << pad("Lifecycle Point", w_point) << " | " << pad("Hook", w_hook) << " | "
    << pad("Order", w_order) << " |\n";
  o << "| " << std::string(w_point, '-') << " | " << std::string(w_hook, '-') << " | "
    << std::string(w_order, '-') << " |\n";
  for (std::size_t i = 0; i < kNumPoints; ++i) {
    const std::string name(to_string(static_cast<Point>(i)));
    if (t.points[i].empty()) {
      o << "| " << pad(name, w_point) << " | " << pad("(none)", w_hook) << " | " << pad("", w_order)
        << " |\n";
      continue;
    }
    bool first = true;
    for (const auto& s : t.points[i]) {
      o << "| " << pad(first ? name : "", w_point) << " | " << pad(s.instance, w_hook) << " | "
        << rpad(std::to_string(s.order), w_order) << " |\n";
      first = false;
    }
  }
  static const char* kDefaults[kNumStages] = {
      "default: task.forward()", "default: loss.backward()", "default: optimizer.step()",
      "default: optimizer.zero_grad()", "default: forward, loss, backward"};
  // In the order a training step reaches them: gradients wraps forward and backward.
  static const Stage kStepOrder[kNumStages] = {Stage::gradients, Stage::forward, Stage::backward,
                                               Stage::optimizer_step, Stage::zero_grad};
  std::vector<std::string> chains;
  std::size_t w_stage = std::string("Stage").size(),
              w_chain = std::string("Chain (call order)").size();
  for (const Stage st : kStepOrder) {
    const auto i = static_cast<std::size_t>(st);
    std::string c;
    for (const auto& s : t.stages[i]) c += s.instance + "(" + std::to_string(s.order) + ") -> ";
    c += kDefaults[i];
    w_chain = std::max(w_chain, c.size());
    w_stage = std::max(w_stage, to_string(st).size());
    chains.push_back(c);
  }
  o << "\n| " << pad("Stage", w_stage) << " | " << pad("Chain (call order)", w_chain) << " |\n";
  o << "| " << std::string(w_stage, '-') << " | " << std::string(w_chain, '-') << " |\n";
  for (std::size_t k = 0; k < kNumStages; ++k)
    o << "| " << pad(std::string(to_string(kStepOrder[k])), w_stage) << " | "
      << pad(chains[k], w_chain) << " |\n";
  if (!t.profiled_by.empty()) {
    o << "\nProfiled (asked by";
    for (const auto& h : t.profiled_by) o << " " << h;
    o << "): every hook, stage handler and step phase above is timed.\n";
  }
  return o.str();
}

}  // namespace wick
