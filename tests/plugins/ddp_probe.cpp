// Test-only hook for the data-parallel tests: dumps each rank's final parameters and step
// count, evaluates the whole validation set in one process (the reference for reduced
// metrics), and injects faults (a rank kills itself, a rank alone asks to stop, two backward
// passes per micro-batch, slow computation).
#include <wick/context.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace {

class DdpProbe : public wick::Hook {
 public:
  explicit DdpProbe(const wick::Params& p)
      : kill_rank_(p.get_int("kill_rank")),
        kill_at_step_(p.get_int("kill_at_step")),
        stop_rank_(p.get_int("stop_rank")),
        stop_at_step_(p.get_int("stop_at_step")),
        stop_after_epoch_(p.get_int("stop_after_epoch")),
        stop_before_fit_(p.get_bool("stop_before_fit")),
        backward_twice_(p.get_bool("backward_twice")),
        kill_fresh_only_(p.get_bool("kill_fresh_only")),
        slow_ms_(p.get_int("slow_ms")) {}

  void connect(wick::Registrar& r) override {
    // A second backward pass into the same gradients, before the stage's own.
    if (backward_twice_)
      r.stage(wick::Stage::backward, [](wick::Context& c, wick::Next next) {
        c.backward_loss().backward({}, /*retain_graph=*/true);
        return next();
      });
    r.on(wick::Point::before_step, [this](wick::Context& c) {
      const auto& s = c.state();
      if (s.training() && s.rank == kill_rank_ && s.optimizer_step == kill_at_step_ &&
          !(kill_fresh_only_ && !c.run().resume.empty()))
        std::raise(SIGKILL);
    });
    // Computation that outweighs the exchange of the gradients (the ddp hook's timings).
    if (slow_ms_ > 0)
      r.on(wick::Point::after_pred, [this](wick::Context&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
      });
    r.on(wick::Point::after_step, [this](wick::Context& c) {
      const auto& s = c.state();
      if (s.training() && s.rank == stop_rank_ && s.optimizer_step == stop_at_step_)
        c.request_stop("ddp_probe: rank " + std::to_string(s.rank) + " asked to stop");
    });
    r.on(wick::Point::before_fit, [this](wick::Context& c) {
      if (stop_before_fit_ && c.state().rank == stop_rank_)
        c.request_stop("ddp_probe: rank " + std::to_string(c.state().rank) + " asked to stop");
    });
    r.on(wick::Point::after_epoch, [this](wick::Context& c) {
      const auto& s = c.state();
      if (s.rank == stop_rank_ && s.epoch == stop_after_epoch_)
        c.request_stop("ddp_probe: rank " + std::to_string(s.rank) + " asked to stop");
    });
    r.on(wick::Point::after_fit, [](wick::Context& c) { dump(c); });
  }

 private:
  static void dump(wick::Context& c) {
    const auto& s = c.state();
    const std::filesystem::path dir = c.run().output_dir;
    const auto rank = std::to_string(s.rank);
    // Parameters as text with 9 significant digits (float32 round trip).
    if (auto* f = std::fopen((dir / ("params_rank" + rank + ".txt")).c_str(), "w")) {
      for (const auto& p : c.model().parameters()) {
        auto t = p.detach().to(torch::kFloat).contiguous().reshape({-1});
        const float* v = t.data_ptr<float>();
        for (std::int64_t i = 0; i < t.numel(); ++i) std::fprintf(f, "%.9g\n", v[i]);
      }
      std::fclose(f);
    }
    if (auto* f = std::fopen((dir / ("steps_rank" + rank + ".txt")).c_str(), "w")) {
      std::fprintf(f, "%lld %lld\n", static_cast<long long>(s.optimizer_step),
                   static_cast<long long>(s.micro_step));
      std::fclose(f);
    }
    // The whole validation set in one batch on this process alone: what a single-process run
    // with these weights reports.
    auto valid = c.task().valid_data();
    if (!valid || !s.is_main_process()) return;
    torch::NoGradGuard ng;
    c.model().eval();
    wick::Fetch fetch;
    fetch.phase = wick::Phase::valid;
    auto batch = valid->get(torch::arange(valid->size(), torch::kLong), fetch);
    auto pred = c.task().forward(c, batch);
    auto out = wick::classification_loss(pred, batch.target, /*with_accuracy=*/true);
    c.model().train();
    if (auto* f = std::fopen((dir / "full_eval.json").c_str(), "w")) {
      std::fprintf(f, "{\"valid/loss\": %.17g", out.loss.item<double>());
      for (const auto& [k, v] : out.metrics)
        std::fprintf(f, ", \"valid/%s\": %.17g", k.c_str(), v.item<double>());
      std::fprintf(f, ", \"samples\": %lld}\n", static_cast<long long>(valid->size()));
      std::fclose(f);
    }
  }

  std::int64_t kill_rank_, kill_at_step_, stop_rank_, stop_at_step_, stop_after_epoch_;
  bool stop_before_fit_, backward_twice_, kill_fresh_only_;
  std::int64_t slow_ms_;
};

}  // namespace

WICK_PLUGIN(DdpProbe, wick::PluginDef("ddp_probe", "1.0.0",
                                      "test probe: dumps parameters, evaluates in one process, "
                                      "injects rank faults")
                          .order(50)
                          .param_int("kill_rank", -1, "rank that SIGKILLs itself (-1: none)")
                          .param_int("kill_at_step", 0, "optimizer step at which it does")
                          .param_int("stop_rank", -1, "rank that alone requests a stop")
                          .param_int("stop_at_step", -1, "optimizer step after which it does")
                          .param_int("stop_after_epoch", -1, "or epoch after which it does")
                          .param_bool("stop_before_fit", false, "or it does at before_fit")
                          .param_bool("kill_fresh_only", false,
                                      "kill only in a run that did not resume (a restart lives)")
                          .param_bool("backward_twice", false,
                                      "run backward once more before the backward stage's own")
                          .param_int("slow_ms", 0, "milliseconds of sleep in every forward"))
