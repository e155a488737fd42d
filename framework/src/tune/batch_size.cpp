// The batch-size finder: trainer.batch_size = "auto". On the CPU a bigger batch is not always
// faster (caches, threads), so sizes are timed; on CUDA the largest that fits is what pays.
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loop/build_trainer.hpp"
#include "tune/probe.hpp"
#include "wick/cluster.hpp"
#include "wick/hook.hpp"
#include "wick/system.hpp"  // resolve_device
#include "wick/tuning.hpp"

namespace fs = std::filesystem;

namespace wick {

namespace {

using Clock = std::chrono::steady_clock;

// Times training batches after `warmup` of them, until `min_s` have passed (and at least 3
// batches) or `max_batches`; ends the fit then, or at the end of the epoch's batches.
class ThroughputProbe : public Hook {
 public:
  ThroughputProbe(std::int64_t warmup, double min_s, std::int64_t max_batches)
      : warmup_(warmup), min_s_(min_s), max_batches_(max_batches) {}

  void connect(Registrar& r) override {
    r.on(Point::after_step, [this](Context& c) {
      ++batches_;
      if (batches_ == warmup_) {
        t0_ = Clock::now();
        samples0_ = c.state().samples_seen;
        return;
      }
      if (batches_ < warmup_) return;
      seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
      samples = c.state().samples_seen - samples0_;
      timed = batches_ - warmup_;
      if ((seconds >= min_s_ && timed >= 3) || timed >= max_batches_) throw CancelFit{};
    });
    // Validation is not what is measured.
    r.on(Point::before_valid, [](Context&) { throw CancelFit{}; });
  }

  double seconds = 0;
  std::int64_t samples = 0, timed = 0;

 private:
  std::int64_t warmup_;
  double min_s_;
  std::int64_t max_batches_, batches_ = 0, samples0_ = 0;
  Clock::time_point t0_;
};

bool out_of_memory(const FitResult& r) {
  return r.status == FitResult::Status::failed &&
         r.error.find("out of memory") != std::string::npos;
}

}  // namespace

std::string BatchSizeChoice::json() const {
  nlohmann::ordered_json j;
  j["chosen"] = batch_size;
  j["method"] = method;
  auto& list = j["probes"] = nlohmann::ordered_json::array();
  for (const auto& p : probes) {
    nlohmann::ordered_json e;
    e["batch_size"] = p.batch_size;
    if (method == "throughput") e["samples_per_s"] = p.samples_per_s;
    if (!p.note.empty()) e["note"] = p.note;
    list.push_back(e);
  }
  return j.dump();
}

std::string BatchSizeChoice::line() const {
  std::string tried;
  for (const auto& p : probes) {
    tried += (tried.empty() ? "" : ", ") + std::to_string(p.batch_size) + " ";
    tried += p.note.empty()
                 ? (method == "throughput" ? std::to_string(std::llround(p.samples_per_s)) + "/s"
                                           : "fits")
                 : p.note;
  }
  return "trainer.batch_size = \"auto\": " + std::to_string(batch_size) +
         (method == "throughput" ? " (the most samples/s; tried "
                                 : " (the largest that fits; tried ") +
         tried + ")";
}

BatchSizeChoice find_batch_size(const Config& cfg, const PluginFinder& finder) {
  const auto& base = cfg.trainer();
  if (const auto job = detect_cluster_env(std::getenv); job.world > 1)
    throw ConfigError(cfg.path() +
                      ": trainer.batch_size = \"auto\" probes one process alone, and ranks "
                      "probing apart could choose apart; with WORLD_SIZE " +
                      std::to_string(job.world) +
                      " set a number (e.g. what `wick fit --auto-batch-size` chooses on one)");
  std::int64_t bound = 1;
  while (bound * 2 <= base.max_batch_size) bound *= 2;
  const bool cuda = resolve_device(base.device, base.auto_device).is_cuda();
  BatchSizeChoice choice;
  auto probe_opts = [&](std::int64_t bs) {
    auto o = base;
    o.batch_size = bs;
    return o;
  };
  if (cuda) {
    // The largest that fits: from the bound down, halving after each out-of-memory error (the
    // probe's tensors are freed with its trainer, into the caching allocator, before the next).
    choice.method = "memory";
    for (std::int64_t bs = bound; bs >= 1; bs /= 2) {
      auto run = run_probe(cfg, finder, probe_opts(bs),
                           std::make_shared<ThroughputProbe>(2, 0.0, 1), "batch-size probe");
      if (out_of_memory(run.result)) {
        choice.probes.push_back({bs, 0, "out of memory"});
        continue;
      }
      if (run.result.status == FitResult::Status::failed)
        throw std::runtime_error("batch size " + std::to_string(bs) + ": " + run.result.error);
      choice.probes.push_back({bs, 0, ""});
      choice.batch_size = bs;
      return choice;
    }
    throw std::runtime_error("trainer.batch_size = \"auto\": not even a batch of 1 fits on " +
                             base.device.str());
  }
  choice.method = "throughput";
  double best = 0;
  int worse = 0;
  for (std::int64_t bs = std::min<std::int64_t>(8, bound); bs <= bound; bs *= 2) {
    auto hook = std::make_shared<ThroughputProbe>(2, 0.25, 50);
    auto run = run_probe(cfg, finder, probe_opts(bs), hook, "batch-size probe");
    if (run.result.status == FitResult::Status::failed)
      throw std::runtime_error("batch size " + std::to_string(bs) + ": " + run.result.error);
    if (hook->timed < 3 || hook->seconds <= 0) {
      // An epoch of fewer batches: larger sizes would have fewer still.
      choice.probes.push_back({bs, 0, "too few batches"});
      break;
    }
    const double rate = static_cast<double>(hook->samples) / hook->seconds;
    choice.probes.push_back({bs, rate, ""});
    best = std::max(best, rate);
    // Twice well below the best: larger sizes are past what the caches hold.
    worse = rate < 0.7 * best ? worse + 1 : 0;
    if (worse == 2) break;
  }
  // Within 5% of the best is within the timing noise: the smallest such size (smaller batches
  // generalise at least as well).
  for (const auto& p : choice.probes)
    if (p.samples_per_s >= 0.95 * best && best > 0) {
      choice.batch_size = p.batch_size;
      break;
    }
  if (choice.batch_size == 0)
    throw std::runtime_error(
        "trainer.batch_size = \"auto\": the training data has too few batches to time even "
        "batches of " +
        std::to_string(choice.probes.front().batch_size) + "; set trainer.batch_size");
  return choice;
}

void choose_auto_batch_size(const Config& cfg, const PluginFinder& finder, const RunInfo& run,
                            TrainerOptions& opts, bool probe) {
  const bool main = detect_cluster_env(std::getenv).rank == 0;
  // A run resumed (or looked at) keeps the size it began with: its checkpoints' batches are of
  // that size, and a new probe could choose another.
  const fs::path summary = fs::path(opts.output_dir) / "summary.json";
  if (!run.resume.empty() || !probe) {
    std::ifstream in(summary);
    const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("batch_size") && j["batch_size"].is_number_integer() &&
        j["batch_size"].get<std::int64_t>() > 0) {
      opts.batch_size = j["batch_size"].get<std::int64_t>();
      if (j.contains("batch_size_search")) opts.batch_size_search = j["batch_size_search"].dump();
      if (main && probe)
        std::fprintf(stderr,
                     "wick: trainer.batch_size = \"auto\": %lld, the size this run began with "
                     "(%s)\n",
                     static_cast<long long>(opts.batch_size), summary.string().c_str());
      return;
    }
  }
  if (!probe) return;
  const auto choice = find_batch_size(cfg, finder);
  opts.batch_size = choice.batch_size;
  opts.batch_size_search = choice.json();
  if (main) std::fprintf(stderr, "wick: %s\n", choice.line().c_str());
}

}  // namespace wick
