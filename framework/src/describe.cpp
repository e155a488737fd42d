#include <algorithm>
#include <sstream>

#include "wick/params.hpp"
#include "wick/schedule.hpp"

namespace wick {

namespace {

struct Requirement {
  Stage stage;
  const HookEntry* entry;
  std::string after_plugin;
  std::string why;
};

class RecordingRegistrar : public Registrar {
 public:
  RecordingRegistrar(const HookEntry& h, HookSink* sink, ScheduleTable& t,
                     std::vector<Requirement>& reqs)
      : h_(h), sink_(sink), t_(t), reqs_(reqs) {}
  void on(Point p, PointFn fn) override {
    t_.points[static_cast<std::size_t>(p)].push_back({h_.instance, h_.plugin, h_.order});
    if (sink_) sink_->on(h_, p, std::move(fn));
  }
  void stage(Stage s, StageFn fn) override {
    t_.stages[static_cast<std::size_t>(s)].push_back({h_.instance, h_.plugin, h_.order});
    if (sink_) sink_->stage(h_, s, std::move(fn));
  }
  void require_after(Stage s, const std::string& plugin, const std::string& why) override {
    reqs_.push_back({s, &h_, plugin, why});
  }
  void on_record(std::function<void(const Record&)> fn) override {
    if (sink_) sink_->on_record(h_, std::move(fn));
  }

 private:
  const HookEntry& h_;
  HookSink* sink_;
  ScheduleTable& t_;
  std::vector<Requirement>& reqs_;
};

}  // namespace

void connect_hooks(std::vector<HookEntry>& hooks, long rank, HookSink* sink, ScheduleTable& table) {
  std::stable_sort(hooks.begin(), hooks.end(),
                   [](const HookEntry& a, const HookEntry& b) { return a.order < b.order; });
  std::vector<Requirement> reqs;
  for (const auto& h : hooks) {
    if (h.main_process_only && rank != 0) continue;
    RecordingRegistrar r(h, sink, table, reqs);
    h.hook->connect(r);
  }
  for (const auto& req : reqs) {
    const auto& chain = table.stages[static_cast<std::size_t>(req.stage)];
    int mine = -1, theirs = -1;
    for (std::size_t k = 0; k < chain.size(); ++k) {
      if (mine < 0 && chain[k].instance == req.entry->instance) mine = static_cast<int>(k);
      if (theirs < 0 && chain[k].plugin == req.after_plugin) theirs = static_cast<int>(k);
    }
    if (mine >= 0 && theirs >= 0 && mine < theirs) {
      int their_order = chain[static_cast<std::size_t>(theirs)].order;
      // Suggest an order that satisfies all of this instance's requirements in the stage.
      int need = their_order;
      for (const auto& other : reqs)
        if (other.entry == req.entry && other.stage == req.stage)
          for (const auto& c : chain)
            if (c.plugin == other.after_plugin) need = std::max(need, c.order);
      throw ConfigError("hook '" + req.entry->instance + "' (order " +
                        std::to_string(req.entry->order) + ") runs before '" + req.after_plugin +
                        "' (order " + std::to_string(their_order) + ") in the " +
                        std::string(to_string(req.stage)) + " stage, but " + req.why + "; give '" +
                        req.entry->instance + "' an order greater than " + std::to_string(need) +
                        " (e.g. order = " + std::to_string(need + 1) + " in its [[hooks]] table)");
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
      "default: loss.backward()", "default: optimizer.step()", "default: optimizer.zero_grad()"};
  std::vector<std::string> chains;
  std::size_t w_stage = std::string("Stage").size(),
              w_chain = std::string("Chain (call order)").size();
  for (std::size_t i = 0; i < kNumStages; ++i) {
    std::string c;
    for (const auto& s : t.stages[i]) c += s.instance + "(" + std::to_string(s.order) + ") -> ";
    c += kDefaults[i];
    w_chain = std::max(w_chain, c.size());
    w_stage = std::max(w_stage, to_string(static_cast<Stage>(i)).size());
    chains.push_back(c);
  }
  o << "\n| " << pad("Stage", w_stage) << " | " << pad("Chain (call order)", w_chain) << " |\n";
  o << "| " << std::string(w_stage, '-') << " | " << std::string(w_chain, '-') << " |\n";
  for (std::size_t i = 0; i < kNumStages; ++i)
    o << "| " << pad(std::string(to_string(static_cast<Stage>(i))), w_stage) << " | "
      << pad(chains[i], w_chain) << " |\n";
  return o.str();
}

}  // namespace wick
