#include "loop/dispatch.hpp"

#include "wick/params.hpp"

namespace wick {

bool Next::operator()() const {
  if (index_ < chain_->handlers.size())
    return chain_->handlers[index_](*ctx_, Next(chain_, index_ + 1, ctx_));
  return chain_->terminal(*ctx_);
}

// Connects a hook's subscriptions to the signals and chains, each stage handler wrapped so
// that an exception can be blamed on the hook that threw it.
class Dispatcher::Sink : public HookSink {
 public:
  explicit Sink(Dispatcher& d) : d_(d) {}
  void on(const HookEntry& h, Point p, PointFn fn) override {
    // connect_hooks calls in hook order; within a group Signals2 keeps connection order, so
    // the slots run in the order of blame_order.
    const auto i = static_cast<std::size_t>(p);
    d_.signals_[i].connect(h.order, std::move(fn), boost::signals2::at_back);
    d_.blame_order_[i].push_back(&h);
    d_.signals_[i].set_combiner(BlameCombiner{&d_.current_, d_.blame_order_[i].data()});
  }
  void stage(const HookEntry& h, Stage s, StageFn fn) override {
    Dispatcher* d = &d_;
    const HookEntry* entry = &h;
    d_.chains_[static_cast<std::size_t>(s)].handlers.push_back(
        [d, entry, fn = std::move(fn)](Context& c, Next n) {
          // Handlers nest: when this one returns, an error belongs to its caller again.
          const HookEntry* caller = d->current_;
          d->current_ = entry;
          bool r = fn(c, n);
          d->current_ = caller;
          return r;
        });
  }
  void on_record(const HookEntry&, std::function<void(const Record&)> fn) override {
    d_.sinks_.push_back(std::move(fn));
  }
  void on_rewind(const HookEntry&, std::function<void(const std::vector<Record>&)> fn) override {
    d_.rewinds_.push_back(std::move(fn));
  }

 private:
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
  if (connected_) return;
  Sink sink(*this);
  connect_hooks(hooks_, rank, &sink, table_);
  connected_ = true;
}

void Dispatcher::set_terminal(Stage s, std::function<bool(Context&)> fn) {
  chains_[static_cast<std::size_t>(s)].terminal = [this, fn = std::move(fn)](Context& c) {
    current_ = nullptr;
    return fn(c);
  };
}

bool Dispatcher::run_stage(Stage s) {
  const auto& chain = chains_[static_cast<std::size_t>(s)];
  where_ = to_string(s);
  bool r = Next(&chain, 0, &ctx_)();
  current_ = nullptr;
  return r;
}

std::string Dispatcher::blame(const std::string& what) const {
  if (current_)
    return "plugin '" + current_->plugin + "' (instance '" + current_->instance + "') at " +
           std::string(where_) + ": " + what;
  return std::string(where_) + ": " + what;
}

std::vector<std::pair<std::string, Hook*>> Dispatcher::stateful_hooks() const {
  std::vector<std::pair<std::string, Hook*>> out;
  for (const auto& h : hooks_)
    if (h.hook->has_state()) out.emplace_back(h.instance, h.hook.get());
  return out;
}

}  // namespace wick
