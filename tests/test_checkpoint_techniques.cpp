// Exact resume with every stateful technique plugin enabled: gradient accumulation (a
// SIGINT inside an accumulation window keeps its pending gradients), the lr schedule, EMA,
// early stopping and the fp16 loss scaler all continue as if never interrupted; so do
// activation checkpointing's recomputed blocks with dropout.
#include "support.hpp"

using namespace wick::test;

namespace {

// 8 batches per epoch in windows of 3, 3, 2: optimizer steps at batches 3, 6, 8 of each epoch.
std::string config(const TempDir& d, const std::string& extra = "", const std::string& task = "") {
  return "[trainer]\nepochs = 3\nseed = 11\nbatch_size = 32\nlog_every = 2\nthreads = 1\n"
         "output_dir = \"" +
         (d / "run").string() + "\"\n" +
         "[task]\nplugin = \"synthetic\"\nsamples = 256\nvalid_samples = 64\n" + task +
         "[[hooks]]\nplugin = \"checkpoint\"\nevery_n_steps = 2\n"
         "[[hooks]]\nplugin = \"grad_accum\"\nsteps = 3\n"
         "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosine\"\nwarmup_steps = 2\n"
         "[[hooks]]\nplugin = \"ema\"\ndecay = 0.9\n"
         "[[hooks]]\nplugin = \"early_stopping\"\nmonitor = \"valid/loss\"\npatience = 100\n"
         "[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"fp16\"\ninit_scale = 1024.0\n"
         "growth_interval = 2\n"
         "[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 1.0\n" +
         extra + test_plugins_toml();
}

// FAULT: the fault plugin's keys, which end the first run with EXIT_CODE.
void interrupted_then_resumed(const std::string& fault, int exit_code,
                              const std::string& hooks = "", const std::string& task = "") {
  TempDir ref;
  write_file(ref / "cfg.toml", config(ref, hooks, task));
  auto r0 = run_wick({"fit", (ref / "cfg.toml").string()});
  INFO(r0.err << r0.out);
  REQUIRE(r0.exit_code == 0);

  TempDir d;
  write_file(d / "cfg.toml", config(d, hooks + "[[hooks]]\nplugin = \"fault\"\n" + fault, task));
  auto r1 = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r1.err << r1.out);
  REQUIRE(r1.exit_code == exit_code);
  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set",
                      "hooks.fault.enabled=false"});
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  // Every stateful hook found its state in the checkpoint.
  CHECK(r2.err.find("starts afresh") == std::string::npos);

  auto a = read_json(ref / "run" / "summary.json"), b = read_json(d / "run" / "summary.json");
  CHECK(b["optimizer_steps"] == a["optimizer_steps"]);
  CHECK(b["model_fingerprint"] == a["model_fingerprint"]);
  CHECK(logged_values(d) == logged_values(ref));
}

}  // namespace

TEST_CASE(
    "with every stateful technique plugin a SIGINT inside an accumulation window resumes exactly") {
  // Batch 13 is the 2nd of the window of batches 12..14 of epoch 2.
  interrupted_then_resumed("action = \"sigint\"\nstep = 13\n", 130);
}

TEST_CASE(
    "with every stateful technique plugin a SIGKILL after the last checkpoint resumes exactly") {
  interrupted_then_resumed("action = \"kill\"\nstep = 14\n", 128 + 9);
}

TEST_CASE(
    "with activation checkpointing and dropout too, a SIGKILL after the last checkpoint resumes "
    "exactly") {
  // The recomputed blocks draw their dropout masks again from the restored generator.
  interrupted_then_resumed("action = \"kill\"\nstep = 14\n", 128 + 9,
                           "[[hooks]]\nplugin = \"activation_checkpointing\"\nmodules = [\"*\"]\n",
                           "hidden = [16, 16]\ndropout = 0.2\n");
}

TEST_CASE(
    "a resume from an epoch's last step writes that epoch's record with the lr the step trained "
    "with") {
  // Optimizer step 6 ends epoch 1 and is checkpointed; the kill comes before its validation, so
  // the resume writes epoch 1's record before it steps, while the optimizer holds step 7's lr.
  interrupted_then_resumed("action = \"kill\"\nat = \"before_valid\"\nepoch = 1\n", 128 + 9);
}
