// The loop's parts in process (issue 46): the one helper every cancellable scope runs through
// (loop/scope.hpp), the resume point (loop/loop_state.hpp), and the fit loop over the synthetic
// task with the checkpoint plugin, stopped mid-epoch and resumed in the same process.
#include <cstdint>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "loop/epoch_values.hpp"
#include "loop/loop_state.hpp"
#include "loop/scope.hpp"
#include "support.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/state_dict.hpp"
#include "wick/trainer.hpp"

using namespace wick::test;
using wick::CancelScope;

namespace wick {
// For Catch's messages (a vector of them prints through LibTorch's operator<< for vectors).
std::ostream& operator<<(std::ostream& out, CancelScope s) {
  return out << (s == CancelScope::step ? "step" : s == CancelScope::epoch ? "epoch" : "fit");
}
}  // namespace wick

TEST_CASE("run_scope ends a scope at a cancel of its own kind and lets every other go on") {
  std::vector<CancelScope> heard;
  auto cancelled = [&](CancelScope s) { heard.push_back(s); };
  int after = 0;
  // No cancel: the body runs to its end.
  CHECK(wick::run_scope<CancelScope::step>([&] { ++after; }, cancelled));
  CHECK(after == 1);
  CHECK(heard.empty());
  // A CancelStep ends a step there: what follows it in the body does not run.
  CHECK_FALSE(wick::run_scope<CancelScope::step>(
      [&] {
        throw wick::CancelStep();
        ++after;
      },
      cancelled));
  CHECK(after == 1);
  CHECK(heard == std::vector<CancelScope>{CancelScope::step});
  // A CancelEpoch goes through a step to its epoch, which ends there; the step hears nothing.
  heard.clear();
  bool rest_of_epoch = false;
  CHECK_FALSE(wick::run_scope<CancelScope::epoch>(
      [&] {
        wick::run_scope<CancelScope::step>([] { throw wick::CancelEpoch(); }, cancelled);
        rest_of_epoch = true;
      },
      cancelled));
  CHECK_FALSE(rest_of_epoch);
  CHECK(heard == std::vector<CancelScope>{CancelScope::epoch});
  // A CancelFit and an error leave both scopes to the fit.
  heard.clear();
  CHECK_THROWS_AS(
      wick::run_scope<CancelScope::epoch>(
          [&] { wick::run_scope<CancelScope::step>([] { throw wick::CancelFit(); }, cancelled); },
          cancelled),
      wick::CancelFit);
  CHECK_THROWS_AS(
      wick::run_scope<CancelScope::step>([] { throw std::runtime_error("boom"); }, cancelled),
      std::runtime_error);
  CHECK(heard.empty());
}

TEST_CASE("an epoch's values from a checkpoint without sample counts weigh a batch's size each") {
  // Checkpoints written before the counts were kept: each batch counted as a whole one.
  wick::StateDict old;
  old.set_tensor("epoch_losses", torch::tensor({1.0, 2.0, 3.0}));
  old.set_int("logged_upto", 1);
  old.set_int("metrics", 1);
  old.set_string("metric_name.0", "acc");
  old.set_tensor("metric_values.0", torch::tensor({0.5, 0.25}));
  old.set_int("metric_logged.0", 0);
  wick::EpochValues v;
  v.load(old, 32);
  CHECK(v.loss_samples == std::vector<double>{32, 32, 32});
  CHECK(v.metric_samples == std::vector<std::vector<double>>{{32, 32}});
  CHECK(v.logged_loss == 1);
  // Written now, they come back as they were.
  v.add_loss(torch::tensor(4.0), 5);
  wick::StateDict now;
  v.save(now);
  wick::EpochValues back;
  back.load(now, 32);
  CHECK(back.loss_samples == std::vector<double>{32, 32, 32, 5});
  CHECK(back.losses.size() == 4);

  // A damaged checkpoint whose counts are not one a value is refused, naming the key.
  now.set_tensor("epoch_loss_samples", torch::tensor({32.0, 5.0}));
  CHECK_THROWS_WITH(back.load(now, 32), Catch::Contains("epoch_loss_samples does not match"));
  now.set_tensor("epoch_loss_samples", torch::tensor({32.0, 32.0, 32.0, 5.0}));
  now.set_tensor("metric_samples.0", torch::ones({2, 1}, torch::kDouble));
  CHECK_THROWS_WITH(back.load(now, 32), Catch::Contains("metric_samples.0 does not match"));
}

TEST_CASE("the resume point: the restored epoch starts at its batch, its values are kept once") {
  wick::ResumePoint r;
  CHECK_FALSE(r.resumed());
  CHECK(r.first_epoch() == 0);
  CHECK(r.first_batch(0) == 0);
  CHECK_FALSE(r.rewind_records());
  CHECK_FALSE(r.take_mid_epoch(0));

  r.restored({2, 5}, 17, 4);
  CHECK(r.resumed());
  CHECK(r.accumulation() == 4);
  CHECK(r.first_epoch() == 2);
  CHECK(r.first_batch(2) == 5);
  CHECK(r.first_batch(3) == 0);  // the epochs after it start at their first batch
  REQUIRE(r.rewind_records());
  CHECK(*r.rewind_records() == 17);
  // The restored epoch continues its restored values; the next epoch starts its own.
  CHECK(r.take_mid_epoch(5));
  CHECK_FALSE(r.take_mid_epoch(5));

  // A restore at an epoch's start has no earlier values to keep.
  wick::ResumePoint at_start;
  at_start.restored({1, 0}, 4, 0);
  CHECK_FALSE(at_start.take_mid_epoch(0));

  // A new fit forgets the rewind; "--resume auto" with nothing restored rewinds to none.
  r.begin_fit();
  CHECK_FALSE(r.rewind_records());
  wick::ResumePoint fresh;
  fresh.start_afresh();
  REQUIRE(fresh.rewind_records());
  CHECK(*fresh.rewind_records() == 0);
  CHECK_FALSE(fresh.resumed());
}

namespace {

// 256 samples / batch 32: 8 batches an epoch, 24 in 3; a checkpoint every 4 steps.
std::string loop_config(const fs::path& run_dir, const std::string& trainer_extra = "") {
  return "[trainer]\nepochs = 3\nseed = 7\nbatch_size = 32\nthreads = 1\nlog_every = 0\n" +
         trainer_extra + "output_dir = \"" + run_dir.string() +
         "\"\n[task]\nplugin = \"synthetic\"\nsamples = 256\nvalid_samples = 64\n"
         "[[hooks]]\nplugin = \"checkpoint\"\nevery_n_steps = 4\n";
}

std::unique_ptr<wick::Trainer> trainer(const TempDir& d, const std::string& text,
                                       const std::string& resume = "") {
  write_file(d / "cfg.toml", text);
  auto cfg = wick::Config::load((d / "cfg.toml").string());
  wick::RunInfo run;
  run.resume = resume;
  return wick::make_trainer(cfg, wick::PluginFinder({WICK_PLUGIN_DIR}), run);
}

}  // namespace

TEST_CASE("the fit loop in process: stopped by max_steps mid-epoch and resumed, it ends exactly") {
  TempDir ref_dir;
  auto ref = trainer(ref_dir, loop_config(ref_dir / "run"));
  REQUIRE(ref->fit().status == wick::FitResult::Status::completed);
  REQUIRE(ref->state().optimizer_step == 24);

  TempDir d;
  {
    // Step 11 is the 3rd batch of epoch 1: the loop stops there, between steps.
    auto t = trainer(d, loop_config(d / "run", "max_steps = 11\n"));
    const auto res = t->fit();
    INFO(res.error);
    REQUIRE(res.status == wick::FitResult::Status::completed);
    CHECK_THAT(res.stop_reason, Catch::Contains("max_steps (11) reached"));
    CHECK(t->state().optimizer_step == 11);
    const auto at = t->context().position();
    CHECK(at.epoch == 1);
    CHECK(at.batch == 3);
    CHECK(fs::exists(d / "run" / "checkpoints" / "ckpt-e0001-b0000003" / "manifest.json"));
    CHECK_FALSE(fs::exists(d / "run" / "checkpoints" / "ckpt-e0002-b0000000"));
  }
  // The same process resumes: the loop starts at that batch, and the restored epoch's values
  // count in its record as they would have.
  auto t = trainer(d, loop_config(d / "run"), "latest");
  const auto res = t->fit();
  INFO(res.error);
  REQUIRE(res.status == wick::FitResult::Status::completed);
  CHECK(t->state().optimizer_step == 24);
  CHECK(t->state().samples_seen == 768);
  CHECK(t->model_fingerprint() == ref->model_fingerprint());
  const auto ref_summary = read_json(ref_dir / "run" / "summary.json");
  const auto summary = read_json(d / "run" / "summary.json");
  CHECK(summary["valid/loss"] == ref_summary["valid/loss"]);
  CHECK(summary["epochs"] == 3);
}

TEST_CASE("the peak probe after the first step counts in the fit's time_s, not in epoch 0's time") {
  TempDir d;
  REQUIRE(trainer(d, loop_config(d / "run"))->fit().status == wick::FitResult::Status::completed);
  const auto recs = read_jsonl(d / "run" / "metrics.jsonl");
  REQUIRE(recs.size() == 3);  // log_every = 0: the epochs' records
  INFO(recs[0].dump());
  // The probe runs 50 ms of warm-up at least (then up to 0.25 s): epoch 0's time and its
  // samples/s leave it out, as every other rate does.
  CHECK(recs[0]["time_s"].get<double>() - recs[0]["epoch_time_s"].get<double>() >= 0.05);
}
