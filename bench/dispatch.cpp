// Dispatch: what the lifecycle points cost per training step with 0, 1, 8 and 32 no-op hooks
// on every point, through the trainer's own emit path, against a plain
// std::vector<std::function> loop and a bare Boost.Signals2 signal doing the same calls.
// Timed here; counted in instructions under callgrind by a child run of this binary.
#include <torch/torch.h>
#include "callgrind.hpp"

#include <boost/signals2.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common.hpp"
#include "wick/task.hpp"
#include "wick/trainer.hpp"

namespace wick::bench {

namespace fs = std::filesystem;
namespace sig2 = boost::signals2;

namespace {

// The points a training step fires, in order.
const std::vector<Point> kStepPoints = {Point::before_step, Point::after_pred, Point::after_loss,
                                        Point::after_backward, Point::after_step};
const std::vector<int> kHookCounts = {0, 1, 8, 32};

// The smallest task a Trainer accepts: dispatch needs a trainer, not a model.
class TinyTask : public Task {
 public:
  std::shared_ptr<torch::nn::Module> model() override {
    net_ = torch::nn::Linear(1, 1);
    return net_.ptr();
  }
  std::shared_ptr<Dataset> train_data() override {
    return std::make_shared<TensorDataset>(torch::zeros({1, 1}), torch::zeros({1}, torch::kLong));
  }
  at::Tensor forward(Context&, const Batch& b) override { return net_->forward(b.input); }
  Output loss(Context&, const at::Tensor& pred, const Batch&) override {
    Output o;
    o.loss = pred.sum();
    return o;
  }

 private:
  torch::nn::Linear net_{nullptr};
};

// Subscribes a counting no-op to every lifecycle point.
class NoopHook : public Hook {
 public:
  explicit NoopHook(std::int64_t* counter) : counter_(counter) {}
  void connect(Registrar& r) override {
    for (std::size_t p = 0; p < kNumPoints; ++p)
      r.on(static_cast<Point>(p), [c = counter_](Context&) { ++*c; });
  }

 private:
  std::int64_t* counter_;
};

using BareSignal = sig2::signal_type<void(Context&), sig2::keywords::mutex_type<sig2::dummy_mutex>,
                                     sig2::keywords::group_type<int>>::type;
using PlainList = std::vector<std::function<void(Context&)>>;

// One set-up per hook count: a connected trainer, the same calls as plain std::function lists
// and as bare Signals2 signals (one per step point).
struct Rig {
  int hooks = 0;
  std::int64_t counter = 0;
  std::unique_ptr<Trainer> trainer;
  std::array<PlainList, 5> plain;
  std::array<BareSignal, 5> bare;

  explicit Rig(int n) : hooks(n) {
    TrainerOptions o;
    o.write_outputs = false;
    trainer = std::make_unique<Trainer>(o, std::make_shared<TinyTask>());
    for (int i = 0; i < n; ++i) {
      HookEntry e;
      e.hook = std::make_shared<NoopHook>(&counter);
      e.plugin = "noop";
      e.instance = "noop" + std::to_string(i);
      e.order = i % 4;  // a few distinct orders, as real hook sets have
      trainer->add_hook(std::move(e));
    }
    trainer->connect();
    auto* c = &counter;
    for (std::size_t p = 0; p < plain.size(); ++p)
      for (int i = 0; i < n; ++i) {
        plain[p].push_back([c](Context&) { ++*c; });
        bare[p].connect(i % 4, [c](Context&) { ++*c; });
      }
  }
};

// Kept out of line so the compiler cannot see through the loop into the calls.
[[gnu::noinline]] void plain_steps(Rig& rig, std::int64_t steps) {
  Context& ctx = rig.trainer->context();
  for (std::int64_t s = 0; s < steps; ++s)
    for (auto& list : rig.plain)
      for (auto& f : list) f(ctx);
}

[[gnu::noinline]] void bare_steps(Rig& rig, std::int64_t steps) {
  Context& ctx = rig.trainer->context();
  for (std::int64_t s = 0; s < steps; ++s)
    for (auto& sig : rig.bare) sig(ctx);
}

void trainer_steps(Rig& rig, std::int64_t steps) {
  rig.trainer->emit_for_benchmark(kStepPoints, steps);
}

enum class Variant { trainer, plain, bare };
const char* name(Variant v) {
  switch (v) {
    case Variant::trainer:
      return "trainer";
    case Variant::plain:
      return "plain_std_function";
    case Variant::bare:
      return "bare_signals2_dummy_mutex";
  }
  return "?";
}

void run_variant(Variant v, Rig& rig, std::int64_t steps) {
  switch (v) {
    case Variant::trainer:
      trainer_steps(rig, steps);
      break;
    case Variant::plain:
      plain_steps(rig, steps);
      break;
    case Variant::bare:
      bare_steps(rig, steps);
      break;
  }
}

// Steps per measurement so that one takes about `target` seconds.
std::int64_t calibrate(Variant v, Rig& rig, double target) {
  std::int64_t steps = 1000;
  for (;;) {
    const auto t0 = Clock::now();
    run_variant(v, rig, steps);
    const double dt = seconds_since(t0);
    if (dt >= target / 4 || steps >= (1LL << 30))
      return std::max<std::int64_t>(1000, static_cast<std::int64_t>(static_cast<double>(steps) *
                                                                    target / std::max(dt, 1e-9)));
    steps *= 4;
  }
}

}  // namespace

json run_dispatch(Settings& s) {
  const int rounds = s.smoke ? 2 : 9;
  const double target = s.smoke ? 0.002 : 0.02;
  std::vector<std::unique_ptr<Rig>> rigs;
  for (int n : kHookCounts) rigs.push_back(std::make_unique<Rig>(n));
  const std::vector<Variant> variants = {Variant::trainer, Variant::plain, Variant::bare};

  std::map<std::pair<int, int>, std::int64_t> steps;
  for (std::size_t r = 0; r < rigs.size(); ++r)
    for (auto v : variants)
      steps[{static_cast<int>(r), static_cast<int>(v)}] = calibrate(v, *rigs[r], target);

  // Rounds over every (hooks, variant), so load changes hit all of them alike.
  std::map<std::pair<int, int>, std::vector<double>> us;
  for (int round = 0; round < rounds; ++round)
    for (std::size_t r = 0; r < rigs.size(); ++r)
      for (auto v : variants) {
        const auto key = std::make_pair(static_cast<int>(r), static_cast<int>(v));
        const std::int64_t n = steps[key];
        const std::int64_t before = rigs[r]->counter;
        const auto t0 = Clock::now();
        run_variant(v, *rigs[r], n);
        us[key].push_back(seconds_since(t0) * 1e6 / static_cast<double>(n));
        // Every variant must really make hooks x points calls per step.
        if (rigs[r]->counter - before != n * rigs[r]->hooks * 5)
          throw std::runtime_error("dispatch bench: wrong number of hook calls");
      }

  json out;
  out["points_per_step"] = kStepPoints.size();
  out["method"] =
      "us per training step for the 5 points a step fires; median of rounds; each no-op hook "
      "subscribes to every point; trainer = Trainer::emit_for_benchmark (the loop's emit)";
  json rows = json::array();
  double trainer0 = 0;
  for (std::size_t r = 0; r < rigs.size(); ++r) {
    json row;
    row["hooks"] = rigs[r]->hooks;
    for (auto v : variants)
      row[name(v)] = make_stats(us[{static_cast<int>(r), static_cast<int>(v)}]).to_json();
    const double t = row["trainer"]["median"].get<double>();
    if (r == 0) trainer0 = t;
    row["trainer_added_us_per_step"] = t - trainer0;
    rows.push_back(row);
  }
  out["rows"] = rows;

  // A point nobody subscribed to: one flag test in the loop's emit.
  {
    Rig& rig = *rigs[0];
    const std::vector<Point> one = {Point::before_valid};
    const std::int64_t n = s.smoke ? 100000 : 20000000;
    std::vector<double> ns;
    for (int round = 0; round < (s.smoke ? 2 : 7); ++round) {
      const auto t0 = Clock::now();
      rig.trainer->emit_for_benchmark(one, n);
      ns.push_back(seconds_since(t0) * 1e9 / static_cast<double>(n));
    }
    out["unsubscribed_point_ns"] = make_stats(ns).to_json();
  }
  return out;
}

// ---- callgrind -----------------------------------------------------------------------------

int dispatch_callgrind_main(long steps) {
  std::vector<std::unique_ptr<Rig>> rigs;
  for (int n : kHookCounts) rigs.push_back(std::make_unique<Rig>(n));
  // Warm each path once so that lazy binding and first-call work are not counted.
  for (auto& r : rigs)
    for (auto v : {Variant::trainer, Variant::plain, Variant::bare}) run_variant(v, *r, 2);
  const std::vector<Point> one = {Point::before_valid};
  rigs[0]->trainer->emit_for_benchmark(one, 2);

  CALLGRIND_START_INSTRUMENTATION;
  for (auto& r : rigs)
    for (auto v : {Variant::trainer, Variant::plain, Variant::bare}) {
      const std::string label = std::string(name(v)) + " " + std::to_string(r->hooks);
      CALLGRIND_ZERO_STATS;
      run_variant(v, *r, steps);
      CALLGRIND_DUMP_STATS_AT(label.c_str());
    }
  CALLGRIND_ZERO_STATS;
  rigs[0]->trainer->emit_for_benchmark(one, steps);
  CALLGRIND_DUMP_STATS_AT("unsubscribed 0");
  CALLGRIND_STOP_INSTRUMENTATION;
  return 0;
}

json run_callgrind(Settings& s) {
  json out;
  const std::string valgrind = find_in_path("valgrind");
  if (valgrind.empty()) {
    out["skipped"] = "valgrind not found (apt-get install valgrind)";
    return out;
  }
  const long steps = s.smoke ? 50 : 2000;
  const fs::path dir = fs::path(s.work_dir) / "callgrind";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto r = run_child({valgrind, "--tool=callgrind", "--instr-atstart=no",
                      "--callgrind-out-file=" + (dir / "cg.out").string(), self_exe(),
                      "--dispatch-callgrind", std::to_string(steps)});
  if (r.exit_code != 0) {
    out["skipped"] =
        "callgrind run failed: " + r.err.substr(r.err.size() > 2000 ? r.err.size() - 2000 : 0);
    return out;
  }
  const auto ir = read_callgrind_dumps(dir.string());
  out["steps"] = steps;
  out["method"] =
      "valgrind --tool=callgrind, instructions (Ir) per training step (5 points) counted "
      "between client requests around each loop; unsubscribed: per emit of a point with no hook";
  json rows = json::array();
  for (int n : kHookCounts) {
    json row;
    row["hooks"] = n;
    for (auto v : {Variant::trainer, Variant::plain, Variant::bare}) {
      auto it = ir.find(std::string(name(v)) + " " + std::to_string(n));
      row[name(v)] = it == ir.end() ? json() : json(it->second / static_cast<double>(steps));
    }
    rows.push_back(row);
  }
  out["ir_per_step"] = rows;
  auto it = ir.find("unsubscribed 0");
  out["unsubscribed_point_ir"] =
      it == ir.end() ? json() : json(it->second / static_cast<double>(steps));
  if (ir.empty()) out["skipped"] = "no callgrind dumps could be read in " + dir.string();
  return out;
}

}  // namespace wick::bench
