// Sharded optimizer state (ddp's shard_optimizer, ZeRO stage 1, and shard_gradients, stage
// 2) and the zero3 strategy (parameters sharded too) on 2 ranks over loopback: the same
// training as plain ddp, half the state per rank, checkpoints that hold the whole state and
// resume on another number of ranks.
#include <cmath>
#include <regex>

#include "support.hpp"

using namespace wick::test;

namespace {

// The ddp tests' synthetic MLP (12 -> 24 -> 16 -> 5: 797 parameters) with Adam, accumulation
// over 2 batches, clipping, a schedule and fp16 loss scaling that starts far too high (so
// steps overflow and are skipped, on every rank alike: from 3.4e38, about the largest float32 a
// parameter may hold, the scale grows after each good step, past float32's range).
std::string config(const fs::path& run, const std::string& extra = "") {
  return "[trainer]\nepochs = 2\nseed = 3\nbatch_size = 16\nlog_every = 4\nthreads = 1\n"
         "output_dir = \"" +
         run.string() +
         "\"\n"
         "[task]\nplugin = \"synthetic\"\nsamples = 512\nvalid_samples = 64\nfeatures = 12\n"
         "hidden = [24, 16]\nclasses = 5\nseed = 7\n"
         "[optimizer]\nname = \"adam\"\nlr = 0.01\n"
         "[[hooks]]\nplugin = \"ddp\"\ntimeout_s = 20.0\n"
         "[[hooks]]\nplugin = \"grad_accum\"\nsteps = 2\n"
         "[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 0.5\n"
         "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosine\"\nwarmup_steps = 2\n"
         "[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"fp16\"\ninit_scale = "
         "3.4e38\ngrowth_interval = 1\n"
         "[[hooks]]\nplugin = \"ddp_probe\"\n" +
         extra + test_plugins_toml();
}

// "ddp: rank R holds N bytes of optimizer state" of each rank, by rank.
std::vector<long long> state_bytes(const std::string& err) {
  std::vector<long long> v(2, -1);
  static const std::regex re(R"(ddp: rank (\d) holds (\d+) bytes of optimizer state)");
  for (std::sregex_iterator it(err.begin(), err.end(), re), end; it != end; ++it)
    v[std::stoul((*it)[1])] = std::stoll((*it)[2]);
  return v;
}

RunResult two_ranks(const fs::path& cfg, const fs::path& out, std::vector<std::string> sets) {
  std::vector<std::string> args{"fit", cfg.string(), "--nproc",
                                "2",   "--set",      "trainer.output_dir=\"" + out.string() + "\""};
  for (auto& s : sets) {
    args.push_back("--set");
    args.push_back(std::move(s));
  }
  auto r = run_wick(args);
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  return r;
}

// The same run with the zero3 strategy in ddp's place.
std::string zero3_config(const fs::path& run, const std::string& extra = "") {
  auto c = config(run, extra);
  const std::string ddp = "plugin = \"ddp\"";
  c.replace(c.find(ddp), ddp.size(), "plugin = \"zero3\"");
  return c;
}

const std::string kStage1 = "hooks.ddp.shard_optimizer=true";
const std::string kStage2 = "hooks.ddp.shard_gradients=true";

}  // namespace

TEST_CASE("sharded optimizer state trains like plain ddp with half the state on each rank") {
  TempDir dir;
  write_file(dir / "cfg.toml", config(dir / "run"));
  auto plain = two_ranks(dir / "cfg.toml", dir / "plain", {});
  auto z1 = two_ranks(dir / "cfg.toml", dir / "z1", {kStage1});
  auto z2 = two_ranks(dir / "cfg.toml", dir / "z2", {kStage1, kStage2});

  // Adam keeps two moments per parameter: 2 x 797 floats, on each rank without sharding, once
  // over the ranks with it.
  const long long whole = 2 * 797 * 4;
  CHECK(state_bytes(plain.err) == std::vector<long long>{whole, whole});
  for (const auto* r : {&z1, &z2}) {
    const auto b = state_bytes(r->err);
    CHECK(b[0] + b[1] == whole);
    CHECK(b[0] > 0);
    CHECK(b[1] > 0);
    // The parameters split evenly, tensors cut where needed: 398 and 399 of the 797 floats.
    CHECK(b == std::vector<long long>{398 * 8, 399 * 8});
  }
  CHECK(z2.err.find("sharded, gradients reduced to their owners") != std::string::npos);

  const auto p = read_numbers(dir / "plain" / "params_rank0.txt");
  for (const char* run : {"z1", "z2"}) {
    INFO(run);
    const auto r0 = read_numbers(dir / run / "params_rank0.txt");
    // Every rank ends with the same weights: each parameter comes from its owner.
    CHECK(max_abs_diff(r0, read_numbers(dir / run / "params_rank1.txt")) == 0.0);
    // The same steps as plain ddp (the clipping norm is summed over shards: float rounding).
    CHECK(max_abs_diff(p, r0) <= 1e-5);
  }
  const auto sp = read_json(dir / "plain" / "summary.json");
  const auto s2 = read_json(dir / "z2" / "summary.json");
  // The overflowing first steps were skipped on every rank alike.
  CHECK(sp["skipped_steps"].get<long long>() > 0);
  CHECK(s2["skipped_steps"] == sp["skipped_steps"]);
  CHECK(s2["optimizer_steps"] == sp["optimizer_steps"]);
  // Trained: the weights moved away from chance.
  CHECK(s2["valid/loss"].get<double>() < std::log(5.0) - 0.1);
}

TEST_CASE("a sharded run's checkpoints hold the whole optimizer state and resume exactly") {
  TempDir dir;
  const std::string ck = "[[hooks]]\nplugin = \"checkpoint\"\nevery_n_steps = 4\n";
  write_file(dir / "cfg.toml", config(dir / "run", "kill_rank = 1\nkill_at_step = 6\n" + ck));
  // Killed by the probe on rank 1 at step 6 (of 8), resumed sharded: as the uninterrupted run.
  auto killed = run_wick(
      {"fit", (dir / "cfg.toml").string(), "--nproc", "2", "--set", kStage1, "--set", kStage2});
  INFO(killed.err << killed.out);
  REQUIRE(killed.exit_code != 0);
  auto resumed =
      run_wick({"fit", (dir / "cfg.toml").string(), "--nproc", "2", "--set", kStage1, "--set",
                kStage2, "--set", "hooks.ddp_probe.kill_rank=-1", "--resume", "latest"});
  INFO(resumed.err << resumed.out);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.out.find("[rank 1] wick: resumed from") != std::string::npos);
  write_file(dir / "clean.toml", config(dir / "clean", ck));
  two_ranks(dir / "clean.toml", dir / "clean", {kStage1, kStage2});
  CHECK(max_abs_diff(read_numbers(dir / "run" / "params_rank0.txt"),
                     read_numbers(dir / "clean" / "params_rank0.txt")) <= 1e-6);

  // The sharded run's last checkpoint and plain ddp's, each continued for one more epoch on
  // one process without sharding: a checkpoint missing rank 1's moments would restart them.
  write_file(dir / "plain.toml", config(dir / "plain", ck));
  two_ranks(dir / "plain.toml", dir / "plain", {});
  for (const char* run : {"clean", "plain"}) {
    auto r = run_wick({"fit", (dir / (std::string(run) + ".toml")).string(), "--resume", "latest",
                       "--set", "trainer.epochs=3", "--set", "trainer.batch_size=32"});
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("resuming a checkpoint of 2 rank(s) x batch 16 on 1 rank(s) x batch 32") !=
          std::string::npos);
  }
  CHECK(max_abs_diff(read_numbers(dir / "clean" / "params_rank0.txt"),
                     read_numbers(dir / "plain" / "params_rank0.txt")) <= 1e-5);
}

TEST_CASE("sharded gradients refuse several optimizers, naming the key") {
  TempDir dir;
  std::string cfg = config(dir / "run");
  const std::string one = "[optimizer]\nname = \"adam\"\nlr = 0.01\n";
  const auto at = cfg.find(one);
  REQUIRE(at != std::string::npos);
  cfg.replace(at, one.size(),
              "[optimizers.0]\nname = \"adam\"\n[optimizers.2]\nname = \"adam\"\n"
              "[optimizers.4]\nname = \"adam\"\n");
  write_file(dir / "cfg.toml", cfg);
  auto r = run_wick(
      {"fit", (dir / "cfg.toml").string(), "--nproc", "2", "--set", kStage1, "--set", kStage2});
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("ddp: shard_gradients = true needs one optimizer") != std::string::npos);
  // zero3 steps each rank's own parameters with the one optimizer: a config error, found on
  // one process too, before the first step.
  const std::string ddp = "plugin = \"ddp\"";
  cfg.replace(cfg.find(ddp), ddp.size(), "plugin = \"zero3\"");
  write_file(dir / "z3.toml", cfg);
  r = run_wick({"fit", (dir / "z3.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("zero3: one optimizer only") != std::string::npos);
  CHECK(read_json(dir / "run" / "summary.json")["optimizer_steps"] == 0);
}

TEST_CASE("sharding options are checked before anything starts") {
  TempDir dir;
  write_file(dir / "cfg.toml", config(dir / "run"));
  auto r = run_wick({"check", (dir / "cfg.toml").string(), "--set", kStage2});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("shard_gradients") != std::string::npos);
  CHECK(r.err.find("needs shard_optimizer = true") != std::string::npos);
  // One strategy per run: ddp and zero3 together would both rendezvous.
  write_file(dir / "both.toml", config(dir / "run", "[[hooks]]\nplugin = \"zero3\"\n"));
  r = wick_check(dir / "both.toml");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("hooks 'ddp' and 'zero3' are both data-parallel strategies; enable one of "
                   "them") != std::string::npos);
  write_file(dir / "z3.toml", zero3_config(dir / "run"));
  r = wick_check(dir / "z3.toml", {"hooks.zero3.timeout_s=0"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("timeout_s") != std::string::npos);
  r = wick_check(dir / "z3.toml", {"trainer.nan_policy=\"skip\""});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("trainer.nan_policy = \"skip\" skips steps on one rank alone") !=
        std::string::npos);
}

TEST_CASE("zero3 trains like ddp, each parameter kept by one rank") {
  TempDir dir;
  write_file(dir / "ddp.toml", config(dir / "ddp"));
  write_file(dir / "z3.toml", zero3_config(dir / "z3"));
  two_ranks(dir / "ddp.toml", dir / "ddp", {});
  const auto z3 = two_ranks(dir / "z3.toml", dir / "z3", {});
  // Last layer first, each tensor whole (balanced_owners): rank 0 the last bias (5), weight
  // (80), the middle bias (16) and weight (384); rank 1 the first bias (24) and weight (288).
  // Counted from the tensors after a step: the others' are freed.
  CHECK(z3.err.find("[rank 0] zero3: rank 0 holds 485 of 797 trainable parameter elements "
                    "between steps") != std::string::npos);
  CHECK(z3.err.find("[rank 1] zero3: rank 1 holds 312 of 797 trainable parameter elements "
                    "between steps") != std::string::npos);
  // The same sums, averaged alike, stepped by the owner: ddp's weights (validated, dumped and
  // fingerprinted whole after the fit), on both ranks.
  const auto ref = read_numbers(dir / "ddp" / "params_rank0.txt");
  CHECK(max_abs_diff(ref, read_numbers(dir / "z3" / "params_rank0.txt")) <= 1e-6);
  CHECK(max_abs_diff(ref, read_numbers(dir / "z3" / "params_rank1.txt")) <= 1e-6);
  const auto sd = read_json(dir / "ddp" / "summary.json");
  const auto sz = read_json(dir / "z3" / "summary.json");
  CHECK(sz["skipped_steps"] == sd["skipped_steps"]);
  CHECK(std::abs(sz["valid/loss"].get<double>() - sd["valid/loss"].get<double>()) <= 1e-5);
  CHECK(fs::file_size(dir / "z3" / "model.pt") > 797 * 4);

  // ema averages whole weights, which zero3 frees between steps: it stops naming both.
  write_file(dir / "ema.toml", zero3_config(dir / "ema", "[[hooks]]\nplugin = \"ema\"\n"));
  auto ema =
      run_wick({"fit", (dir / "ema.toml").string(), "--nproc", "2", "--set", "trainer.epochs=1"});
  INFO(ema.err << ema.out);
  CHECK(ema.exit_code == 1);
  CHECK(ema.err.find("plugin 'ema'") != std::string::npos);
  CHECK(ema.err.find("the data-parallel strategy (zero3) keeps only each rank's own parameters "
                     "between steps; use ddp with ema") != std::string::npos);
}

TEST_CASE("zero3 stopped by a signal on one rank gathers the weights into model.pt") {
  TempDir dir;
  write_file(dir / "cfg.toml",
             zero3_config(dir / "run",
                          "[[hooks]]\nplugin = \"fault\"\naction = \"sigint\"\nstep = 6\n"
                          "rank = 1\n[[hooks]]\nplugin = \"checkpoint\"\nevery_n_steps = 0\n"));
  auto r = run_wick({"fit", (dir / "cfg.toml").string(), "--nproc", "2"});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 130);
  const auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["status"] == "cancelled");
  CHECK(s["optimizer_steps"].get<int>() < 32);
  CHECK(r.err.find("model.pt not written") == std::string::npos);
  // Every parameter whole, not rank 0's share: the cancel checkpoint's weights, the same bytes.
  REQUIRE(s["model_file"].is_string());
  std::vector<fs::path> ckpts;
  for (const auto& e : fs::directory_iterator(dir / "run" / "checkpoints"))
    if (e.path().filename().string().rfind("ckpt-", 0) == 0) ckpts.push_back(e.path());
  REQUIRE(ckpts.size() == 1);
  CHECK(read_file(dir / "run" / "model.pt") == read_file(ckpts[0] / "model.pt"));
}

TEST_CASE("zero3 killed on 2 ranks resumes exactly on 4 ranks") {
  TempDir dir;
  const std::string ck = "[[hooks]]\nplugin = \"checkpoint\"\nevery_n_steps = 4\n";
  write_file(dir / "cfg.toml", zero3_config(dir / "run", "kill_rank = 1\nkill_at_step = 6\n" + ck));
  auto killed = run_wick({"fit", (dir / "cfg.toml").string(), "--nproc", "2"});
  INFO(killed.err << killed.out);
  REQUIRE(killed.exit_code != 0);
  // Rank 0's collective failed, naming it and the likely cause; its weights were sharded:
  // no model.pt, its checkpoints hold them.
  CHECK(std::regex_search(killed.err, std::regex("zero3: [a-z -]+ on rank 0 failed: ")));
  CHECK(killed.err.find("another rank died or stalled; timeout_s = 20 s bounds how long ranks "
                        "wait for each other") != std::string::npos);
  CHECK(killed.err.find("model.pt not written: the data-parallel strategy shards the run") !=
        std::string::npos);
  CHECK(!fs::exists(dir / "run" / "model.pt"));
  // The global batch stays 32: 4 ranks x 8, each owning other parameters than before.
  auto resumed =
      run_wick({"fit", (dir / "cfg.toml").string(), "--nproc", "4", "--set", "trainer.batch_size=8",
                "--set", "hooks.ddp_probe.kill_rank=-1", "--resume", "latest"});
  INFO(resumed.err << resumed.out);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.err.find("resuming a checkpoint of 2 rank(s) x batch 16 on 4 rank(s) x batch 8") !=
        std::string::npos);
  write_file(dir / "clean.toml", zero3_config(dir / "clean", ck));
  two_ranks(dir / "clean.toml", dir / "clean", {});
  const auto clean = read_numbers(dir / "clean" / "params_rank0.txt");
  for (int r = 0; r < 4; ++r)
    CHECK(max_abs_diff(clean, read_numbers(dir / "run" /
                                           ("params_rank" + std::to_string(r) + ".txt"))) <= 1e-6);
}
