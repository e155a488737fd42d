// Tuning (issue 19): `wick lr-find`, trainer.batch_size = "auto" and `wick sweep`, with the
// pieces they are made of checked against hand-computed values.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "support.hpp"
#include "wick/params.hpp"
#include "wick/sweep.hpp"
#include "wick/tuning.hpp"

using namespace wick::test;

namespace {

std::vector<std::vector<std::string>> read_csv(const fs::path& p) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(read_file(p));
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
    rows.push_back(cells);
  }
  return rows;
}

// The records of a run folder's metrics.jsonl without timings.
std::vector<std::string> records(const fs::path& run) {
  std::vector<std::string> out;
  for (const auto& l : read_jsonl(run / "metrics.jsonl")) {
    nlohmann::json kept;
    for (const auto& [k, v] : l.items())
      if (!is_timing_key(k)) kept[k] = v;
    out.push_back(kept.dump());
  }
  return out;
}

// A synthetic run; `slow_ms` > 0 makes each training step that much slower (the test plugin
// thrower), so that a sweep can be watched or killed mid-way.
std::string synthetic(const fs::path& out, int epochs, int slow_ms = 0,
                      const std::string& extra = "") {
  std::string s = test_plugins_toml() + "[trainer]\nepochs = " + std::to_string(epochs) +
                  "\nbatch_size = 32\nlog_every = 0\noutput_dir = \"" + out.string() +
                  "\"\n[task]\nplugin = \"synthetic\"\nsamples = 512\nvalid_samples = 128\n"
                  "[optimizer]\nname = \"adam\"\nlr = 1e-3\n"
                  "[[hooks]]\nplugin = \"checkpoint\"\nevery_n_epochs = 1\n" +
                  extra;
  if (slow_ms > 0)
    s += "[[hooks]]\nplugin = \"thrower\"\naction = \"slow\"\npoint = \"after_step\"\nms = " +
         std::to_string(slow_ms) + "\n";
  return s;
}

}  // namespace

TEST_CASE("lr_ramp and steepest_descent against hand values") {
  wick::LrFindOptions o;
  o.start = 1e-4;
  o.end = 1;
  o.steps = 5;
  CHECK(wick::lr_ramp(o, 0) == Approx(1e-4));
  CHECK(wick::lr_ramp(o, 1) == Approx(1e-3));
  CHECK(wick::lr_ramp(o, 2) == Approx(1e-2));
  CHECK(wick::lr_ramp(o, 4) == Approx(1));

  // Equal steps in log(lr): the central differences are those of the losses. Flat, a fall
  // steepest between points 9 and 11 (0.4 - 0.85 = -0.45), the lowest at 15, then a rise.
  const std::vector<double> s = {1,   1,   1,   1,    1,    1,   1,   1, 0.95, 0.85,
                                 0.6, 0.4, 0.3, 0.25, 0.22, 0.2, 0.5, 1, 3,    9};
  std::vector<wick::LrFindPoint> pts;
  for (std::size_t i = 0; i < s.size(); ++i)
    pts.push_back({static_cast<std::int64_t>(i), std::pow(10.0, -6.0 + 0.3 * i), s[i], s[i]});
  CHECK(wick::steepest_descent(pts) == 10);
  // The fall is after the minimum only: no descent to suggest.
  for (auto& p : pts) p.smoothed = 1 + 0.1 * static_cast<double>(p.step);
  CHECK(wick::steepest_descent(pts) == -1);
}

// The shipped MLP with mixed_precision's dtype = "auto" (bf16 on a CPU with AVX512-BF16 or AMX,
// fp32 elsewhere), one thread. Where the ramp diverges rides on the CPU's kernels: on an
// AVX512-BF16 EPYC the bf16 ramp kills the ReLUs and the loss never passes 4x its lowest before
// lr 10. So this checks what holds on every path (the ramp, the smoothing, the stop rule applied
// as written, the suggestion); make test runs it as AMX, AVX512-BF16, no native bf16 and
// AVX2-only CPUs would (WICK_CPU_DISABLE, tests/CMakeLists.txt).
TEST_CASE("wick lr-find on the Fashion-MNIST MLP suggests a rate in [1e-4, 1e-2]", "[cpu-path]") {
  TempDir dir;
  const auto run = dir / "run";
  write_file(dir / "mlp.toml", read_file(WICK_SOURCE_DIR "/samples/fashion_mnist/mlp.toml") +
                                   "\n[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"auto\"\n");
  // LibTorch's own Adam: fused Adam's rounding (float-equal, not bit-equal) is another path.
  auto r = run_wick({"lr-find", (dir / "mlp.toml").string(), "--set",
                     "trainer.output_dir=" + run.string(), "--set", "optimizer.fused=false",
                     "--set", "trainer.threads=1"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  // The shipped config's hooks that do not change a step are left out: the schedule would
  // fight the ramp, and a checkpoint would be the ramp's weights.
  CHECK_THAT(r.err, Catch::Contains("left out (they do not change how a step trains): progress, "
                                    "metrics_log, lr_schedule, checkpoint"));
  const auto at = r.out.find("suggested learning rate ");
  REQUIRE(at != std::string::npos);
  const double lr = std::stod(r.out.substr(at + 24));
  CHECK(lr >= 1e-4);
  CHECK(lr <= 1e-2);

  // The CSV: an exponential ramp from 1e-7, and the smoothed loss recomputed here by hand
  // (a bias-corrected moving average, 0.98).
  const auto rows = read_csv(run / "lr_find.csv");
  REQUIRE(rows.size() > 20);
  REQUIRE(rows.size() - 1 <= 100);
  CHECK(rows[0] == std::vector<std::string>{"batch", "lr", "loss", "smoothed_loss"});
  const double ratio = std::pow(1e8, 1.0 / 99);
  double avg = 0, weight = 1, lowest = 1e300;
  bool diverged = false;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    REQUIRE(rows[i].size() == 4);
    CHECK(std::stoll(rows[i][0]) == static_cast<long long>(i - 1));
    CHECK(std::stod(rows[i][1]) == Approx(1e-7 * std::pow(ratio, i - 1)).epsilon(1e-6));
    avg = 0.98 * avg + 0.02 * std::stod(rows[i][2]);
    weight *= 0.98;
    const double smoothed = avg / (1 - weight);
    CHECK(std::stod(rows[i][3]) == Approx(smoothed).epsilon(1e-6));
    lowest = std::min(lowest, smoothed);
    // The stop rule: the first batch (after the first two) whose smoothed loss passed 4x the
    // lowest is the last one; without one, the ramp runs its 100 batches to lr 10.
    if (i >= 2 && !(smoothed <= 4 * lowest)) {
      CHECK(i == rows.size() - 1);
      diverged = true;
    }
  }
  if (diverged)
    CHECK_THAT(r.out, Catch::Contains("stopped: the smoothed loss diverged"));
  else
    CHECK(rows.size() - 1 == 100);
  // The plot where gnuplot is installed (the next test runs without it).
  std::set<std::string> expected = {"lr_find.csv"};
  if (on_path("gnuplot")) {
    CHECK(read_file(run / "lr_find.png").substr(0, 8) == "\x89PNG\r\n\x1a\n");
    expected.insert("lr_find.png");
  }
  // Nothing of a fit: no checkpoint, records or summary a later fit could pick up.
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(run)) files.insert(e.path().filename().string());
  CHECK(files == expected);
}

TEST_CASE("wick lr-find stops at the first batch whose smoothed loss diverged") {
  // A ramp to 1e38: the weights overflow whatever the CPU's kernels, so the loss diverges (or
  // stops being finite) before the last batch on every machine.
  TempDir dir;
  write_file(dir / "c.toml", synthetic(dir / "run", 1));
  // Without gnuplot (no PATH): the rate and the CSV, and a word on the missing plot.
  auto r = run_wick({"lr-find", (dir / "c.toml").string(), "--end", "1e38"}, {"PATH="});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("stopped: the smoothed loss diverged"));
  CHECK_THAT(r.err, Catch::Contains("no lr_find.png: gnuplot not found in PATH"));
  CHECK_FALSE(fs::exists(dir / "run" / "lr_find.png"));
  const auto rows = read_csv(dir / "run" / "lr_find.csv");
  REQUIRE(rows.size() >= 3);
  CHECK(rows.size() - 1 < 100);
  double lowest = 1e300;
  for (std::size_t i = 1; i + 1 < rows.size(); ++i) {
    const double smoothed = std::stod(rows[i][3]);
    lowest = std::min(lowest, smoothed);
    CHECK(smoothed <= 4 * lowest);  // no earlier batch passed the bound
  }
  const double last = std::stod(rows.back()[3]);
  CHECK(!(last <= 4 * std::min(lowest, last)));
}

TEST_CASE("wick lr-find refuses a ramp that cannot run, naming the option") {
  const std::string cfg = WICK_SOURCE_DIR "/samples/synthetic.toml";
  auto r = run_wick({"lr-find", cfg, "--start", "0"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--start must be a learning rate > 0"));
  r = run_wick({"lr-find", cfg, "--start", "1e-3", "--end", "1e-4"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--end must be larger than --start (0.001), e.g. --end 10"));
  r = run_wick({"lr-find", cfg, "--end", "inf"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--end must be a finite learning rate"));
  r = run_wick({"lr-find", cfg, "--steps", "5"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--steps must be at least 10"));
}

TEST_CASE("trainer.batch_size = auto chooses the fastest power of two and trains as that size") {
  TempDir dir;
  write_file(dir / "auto.toml", synthetic(dir / "auto", 1));
  auto r = run_wick({"fit", (dir / "auto.toml").string(), "--set", "trainer.batch_size=auto",
                     "--set", "trainer.max_batch_size=100"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("trainer.batch_size = \"auto\": "));
  const auto s = read_json(dir / "auto" / "summary.json");
  const auto chosen = s["batch_size"].get<std::int64_t>();
  const auto& search = s["batch_size_search"];
  CHECK(search["method"] == "throughput");
  CHECK(search["chosen"] == chosen);
  // Powers of two from 8 up to the bound (100: 64 is the last), each timed.
  std::vector<std::int64_t> sizes;
  double best = 0;
  for (const auto& p : search["probes"]) {
    sizes.push_back(p["batch_size"].get<std::int64_t>());
    best = std::max(best, p["samples_per_s"].get<double>());
  }
  REQUIRE(!sizes.empty());
  CHECK(sizes.front() == 8);
  for (std::size_t i = 1; i < sizes.size(); ++i) CHECK(sizes[i] == 2 * sizes[i - 1]);
  CHECK(sizes.back() <= 64);
  // The smallest size within 5% of the best rate.
  for (const auto& p : search["probes"]) {
    if (p["samples_per_s"].get<double>() >= 0.95 * best) {
      CHECK(p["batch_size"] == chosen);
      break;
    }
  }
  // The probes leave no trace in the fit: the same records and weights as that size given.
  write_file(dir / "fixed.toml", synthetic(dir / "fixed", 1));
  auto f = run_wick({"fit", (dir / "fixed.toml").string(), "--set",
                     "trainer.batch_size=" + std::to_string(chosen)});
  REQUIRE(f.exit_code == 0);
  CHECK(records(dir / "auto") == records(dir / "fixed"));
  CHECK(s["model_fingerprint"] == read_json(dir / "fixed" / "summary.json")["model_fingerprint"]);

  // A resumed run keeps the size it began with, probing nothing.
  r = run_wick({"fit", (dir / "auto.toml").string(), "--auto-batch-size", "--set",
                "trainer.max_batch_size=100", "--set", "trainer.epochs=2", "--resume", "latest"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("\"auto\": " + std::to_string(chosen) +
                                    ", the size this run began with"));
  CHECK(read_json(dir / "auto" / "summary.json")["batch_size"] == chosen);
}

TEST_CASE("trainer.batch_size takes a number or \"auto\", and max_batch_size at least 1") {
  TempDir dir;
  write_file(dir / "cfg.toml", synthetic(dir / "run", 1));
  auto r = run_wick({"check", (dir / "cfg.toml").string(), "--set", "trainer.batch_size=big"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--set trainer.batch_size=big: trainer.batch_size must be an "
                                    "integer or \"auto\""));
  r = run_wick({"check", (dir / "cfg.toml").string(), "--set", "trainer.max_batch_size=0"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("max_batch_size"));
  // check builds everything but trains nothing: no probe.
  r = run_wick({"check", (dir / "cfg.toml").string(), "--set", "trainer.batch_size=auto"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, !Catch::Contains("samples/s"));
}

TEST_CASE("sweep parameters, grids, draws and the halving rule against hand values") {
  auto p = wick::parse_sweep_param("optimizer.lr=log:1e-4:1e-2:3");
  CHECK(p.path == "optimizer.lr");
  CHECK(wick::grid_values(p) == std::vector<std::string>{"0.0001", "0.001", "0.01"});
  p = wick::parse_sweep_param("trainer.batch_size=[32, 64]");
  CHECK(wick::grid_values(p) == std::vector<std::string>{"32", "64"});
  p = wick::parse_sweep_param("hooks.grad_clip.max_norm=uniform:1:2:3");
  CHECK(wick::grid_values(p) == std::vector<std::string>{"1.0", "1.5", "2.0"});
  p = wick::parse_sweep_param("trainer.epochs=int:2:4");
  CHECK(wick::grid_values(p) == std::vector<std::string>{"2", "3", "4"});
  p = wick::parse_sweep_param("task.model=[\"mlp\", \"cnn\"]");
  // toml++ writes strings as literal strings.
  CHECK(wick::grid_values(p) == std::vector<std::string>{"'mlp'", "'cnn'"});

  // A grid: the first parameter varies slowest.
  const auto grid = wick::plan_trials(
      {wick::parse_sweep_param("a.x=[1, 2]"), wick::parse_sweep_param("a.y=[3, 4, 5]")}, true, 0,
      0);
  REQUIRE(grid.size() == 6);
  CHECK(grid[0] == std::vector<std::string>{"1", "3"});
  CHECK(grid[2] == std::vector<std::string>{"1", "5"});
  CHECK(grid[3] == std::vector<std::string>{"2", "3"});
  // Draws: within the range, the same for the same seed, others for another.
  const std::vector<wick::SweepParam> lr = {wick::parse_sweep_param("optimizer.lr=log:1e-4:1e-2")};
  const auto a = wick::plan_trials(lr, false, 50, 7), b = wick::plan_trials(lr, false, 50, 7);
  CHECK(a == b);
  CHECK(a != wick::plan_trials(lr, false, 50, 8));
  int low_decade = 0;
  for (const auto& t : a) {
    const double v = std::stod(t[0]);
    CHECK(v >= 1e-4);
    CHECK(v <= 1e-2);
    low_decade += v < 1e-3;
  }
  // Log-uniform: about half of the draws in the lower decade (binomial, 50 draws).
  CHECK(low_decade > 12);
  CHECK(low_decade < 38);

  CHECK(wick::halving_rungs(1, 3, 10) == std::vector<std::int64_t>{1, 3, 9});
  CHECK(wick::halving_rungs(2, 2, 8) == std::vector<std::int64_t>{2, 4});
  // The best ceil(n / eta) go on: of 4 values with eta 2, the best 2.
  CHECK(wick::halving_keeps(0.5, {0.5}, 3, false));  // alone: nothing to beat
  CHECK(wick::halving_keeps(0.2, {0.5, 0.2}, 2, false));
  CHECK_FALSE(wick::halving_keeps(0.5, {0.2, 0.5}, 2, false));
  CHECK(wick::halving_keeps(0.3, {0.1, 0.3, 0.5, 0.7}, 2, false));
  CHECK_FALSE(wick::halving_keeps(0.5, {0.1, 0.3, 0.5, 0.7}, 2, false));
  CHECK(wick::halving_keeps(0.7, {0.1, 0.3, 0.5, 0.7}, 2, true));
  CHECK_FALSE(wick::halving_keeps(std::nan(""), {0.1}, 2, false));

  auto refused = [](const std::string& arg) {
    try {
      (void)wick::parse_sweep_param(arg);
    } catch (const wick::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refused("optimizer.lr=log:0:1"), Catch::Contains("needs LO > 0"));
  CHECK_THAT(refused("optimizer.lr=log:1e-2:1e-4"), Catch::Contains("LO must be below HI"));
  CHECK_THAT(refused("optimizer.lr=exp:1:2"), Catch::Contains("unknown kind 'exp'"));
  CHECK_THAT(refused("optimizer.lr=[]"), Catch::Contains("the list is empty"));
  CHECK_THAT(refused("optimizer.lr=[1e-3]\nx = 2"),
             Catch::Contains("the SPEC holds more than one TOML value"));
  CHECK_THAT(refused("a.x=[" + std::string(1000, '[') + std::string(1001, ']')),
             Catch::Contains("the list nests deeper than 1000 levels"));
  CHECK_THAT(refused("optimizer.lr"), Catch::Contains("expected PATH=SPEC"));
  CHECK_THAT(refused("trainer.epochs=int:1.5:3"), Catch::Contains("whole LO and HI"));
}

TEST_CASE("wick sweep runs a grid two trials at a time and writes results and the best config") {
  TempDir dir;
  write_file(dir / "cfg.toml", synthetic(dir / "run", 2));
  auto r = run_wick({"sweep", (dir / "cfg.toml").string(), "--param",
                     "optimizer.lr=[0.0001, 0.001, 0.01]", "--grid", "--jobs", "2", "--out",
                     (dir / "sweep").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  const auto rows = read_csv(dir / "sweep" / "results.csv");
  REQUIRE(rows.size() == 4);
  CHECK(rows[0][3] == "valid/loss");
  double best = 1e300;
  std::string best_lr;
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  for (int t = 1; t <= 3; ++t) {
    CHECK(rows[t][1] == "completed");
    CHECK(rows[t][2] == "2");
    // The trial is the fit of the config with its value, in its folder, with its share of the
    // cores.
    const auto s = read_json(dir / "sweep" / ("trial-00" + std::to_string(t)) / "summary.json");
    CHECK(s["status"] == "completed");
    const auto overrides = s["overrides"].dump();
    CHECK_THAT(overrides, Catch::Contains("optimizer.lr=" + rows[t][4]));
    CHECK_THAT(overrides, Catch::Contains("trainer.threads=" + std::to_string(threads)));
    const double v = s["valid/loss"].get<double>();
    CHECK(std::stod(rows[t][3]) == Approx(v).epsilon(1e-5));
    if (v < best) {
      best = v;
      best_lr = rows[t][4];
    }
  }
  CHECK_THAT(r.out, Catch::Contains("[trial 2/3] epoch 2/2 valid/loss"));
  CHECK_THAT(read_file(dir / "sweep" / "results.md"), Catch::StartsWith("| trial | status"));
  // best.toml is the config with the best value: it loads, and has it.
  const auto best_toml = read_file(dir / "sweep" / "best.toml");
  CHECK_THAT(best_toml, Catch::Contains("lr = " + best_lr));
  CHECK(run_wick({"check", (dir / "sweep" / "best.toml").string()}).exit_code == 0);

  // Run again: everything is kept, nothing trains again.
  const auto before = file_hashes(dir / "sweep" / "trial-001");
  r = run_wick({"sweep", (dir / "cfg.toml").string(), "--param",
                "optimizer.lr=[0.0001, 0.001, 0.01]", "--grid", "--jobs", "2", "--out",
                (dir / "sweep").string()});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("3 trial(s) kept, 0 resumed"));
  CHECK(file_hashes(dir / "sweep" / "trial-001") == before);
  // Other parameters in the same folder are refused.
  r = run_wick({"sweep", (dir / "cfg.toml").string(), "--param", "optimizer.lr=[0.1]", "--out",
                (dir / "sweep").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("holds another sweep"));
  // So is the same sweep of an edited config: its results are not the new config's.
  auto edited = read_file(dir / "cfg.toml");
  edited.replace(edited.find("valid_samples = 128"), 19, "valid_samples = 96");
  write_file(dir / "cfg.toml", edited);
  r = run_wick({"sweep", (dir / "cfg.toml").string(), "--param",
                "optimizer.lr=[0.0001, 0.001, 0.01]", "--grid", "--jobs", "2", "--out",
                (dir / "sweep").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("as it was before an edit (its sha256 was "));
  // And a trial folder is the sweep's to choose.
  r = run_wick({"sweep", (dir / "cfg.toml").string(), "--param",
                "trainer.output_dir=[\"a\", \"b\"]", "--out", (dir / "other").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("the sweep sets each trial's folder (OUT/trial-NNN)"));
  // A float range on an integer key points to the integer specs.
  r = run_wick({"sweep", (dir / "cfg.toml").string(), "--param", "trainer.batch_size=log:8:64:3",
                "--grid", "--out", (dir / "other").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("for an integer key use int:LO:HI or a list of integers"));
}

TEST_CASE(
    "a sweep trial whose metric is NaN ranks last, and a thread count the config gives is kept") {
  TempDir dir;
  write_file(dir / "cfg.toml", synthetic(dir / "run", 1));
  // lr 1e30 diverges: its valid/loss is not finite, which metrics.jsonl writes as null.
  auto r = run_wick({"sweep", (dir / "cfg.toml").string(), "--param", "optimizer.lr=[1e30, 0.001]",
                     "--grid", "--set", "trainer.nan_policy=\"ignore\"", "--set",
                     "trainer.threads=1", "--out", (dir / "sweep").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  const auto rows = read_csv(dir / "sweep" / "results.csv");
  REQUIRE(rows.size() == 3);
  CHECK(rows[1][1] == "completed");
  CHECK_FALSE(std::isfinite(std::stod(rows[1][3])));
  CHECK(rows[2][1] == "completed");
  CHECK_THAT(read_file(dir / "sweep" / "results.md"), Catch::Contains("| 2 (best) | completed |"));
  CHECK_THAT(read_file(dir / "sweep" / "best.toml"), Catch::Contains("lr = 0.001"));
  for (const char* trial : {"trial-001", "trial-002"})
    CHECK(read_json(dir / "sweep" / trial / "summary.json")["threads"] == 1);
  // With --halving the NaN is a rung's value too, kept as null: the sweep still resumes.
  const std::vector<std::string> halving = {"sweep",
                                            (dir / "cfg.toml").string(),
                                            "--param",
                                            "optimizer.lr=[1e30, 0.001]",
                                            "--grid",
                                            "--set",
                                            "trainer.nan_policy=\"ignore\"",
                                            "--halving",
                                            "--out",
                                            (dir / "halving").string()};
  REQUIRE(run_wick(halving).exit_code == 0);
  CHECK(read_json(dir / "halving" / "sweep.json")["trials"][0]["rungs"]["1"].is_null());
  auto again = run_wick(halving);
  INFO(again.err);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.err, Catch::Contains("2 trial(s) kept"));
}

TEST_CASE("wick sweep --halving stops the trials below the best at a rung") {
  TempDir dir;
  // 3 epochs of ~0.3 s: the sweep has time to stop a trial after its first.
  write_file(dir / "cfg.toml", synthetic(dir / "run", 3, 20));
  auto r = run_wick({"sweep", (dir / "cfg.toml").string(), "--param",
                     "optimizer.lr=[0.01, 0.00001, 0.000001]", "--grid", "--halving", "--eta", "2",
                     "--out", (dir / "sweep").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  const auto rows = read_csv(dir / "sweep" / "results.csv");
  REQUIRE(rows.size() == 4);
  // Trial 1 runs first and alone at each rung; the tiny learning rates are worse after
  // epoch 1 and stopped there (a checkpoint saved, exit 143).
  CHECK(rows[1][1] == "completed");
  CHECK(rows[1][2] == "3");
  for (int t = 2; t <= 3; ++t) {
    CHECK(rows[t][1] == "stopped");
    CHECK(std::stoi(rows[t][2]) < 3);
  }
  CHECK_THAT(r.out, Catch::Contains("is not in the best 1/2 of the 2 trials there"));
  const auto state = read_json(dir / "sweep" / "sweep.json");
  CHECK(state["trials"][1]["rungs"].contains("1"));
}

TEST_CASE("a sweep killed with SIGKILL resumes: finished trials kept, the unfinished one resumed") {
  TempDir dir;
  write_file(dir / "cfg.toml", synthetic(dir / "run", 3, 15));
  const std::vector<std::string> args = {WICK_BIN,
                                         "sweep",
                                         (dir / "cfg.toml").string(),
                                         "--param",
                                         "optimizer.lr=[0.001, 0.002, 0.003]",
                                         "--grid",
                                         "--out",
                                         (dir / "sweep").string()};
  // Started here, killed once trial 2 has a checkpoint of its first epoch.
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(WICK_BIN, argv.data());
    ::_exit(127);
  }
  bool seen = false;
  for (int i = 0; i < 600 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::error_code ec;
    seen = fs::exists(dir / "sweep" / "trial-002" / "checkpoints", ec) &&
           !fs::is_empty(dir / "sweep" / "trial-002" / "checkpoints", ec);
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(seen);
  const auto trial1 = file_hashes(dir / "sweep" / "trial-001");
  CHECK(read_json(dir / "sweep" / "sweep.json")["trials"][0]["status"] == "completed");

  std::vector<std::string> again(args.begin() + 1, args.end());
  auto r = run_wick(again);
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("1 trial(s) kept, 1 resumed from checkpoints"));
  CHECK_THAT(r.out, Catch::Contains("[trial 2/3] resumed"));
  CHECK(file_hashes(dir / "sweep" / "trial-001") == trial1);
  const auto rows = read_csv(dir / "sweep" / "results.csv");
  REQUIRE(rows.size() == 4);
  for (int t = 1; t <= 3; ++t) CHECK(rows[t][1] == "completed");
  // The resumed trial trained exactly as an uninterrupted fit of its config.
  write_file(dir / "plain.toml", synthetic(dir / "plain", 3, 0));
  REQUIRE(
      run_wick({"fit", (dir / "plain.toml").string(), "--set", "optimizer.lr=0.002"}).exit_code ==
      0);
  CHECK(records(dir / "sweep" / "trial-002") == records(dir / "plain"));

  // A status sweep.json cannot hold (a hand edit) is refused, naming the file and the trial.
  auto state = read_json(dir / "sweep" / "sweep.json");
  state["trials"][1]["status"] = "compleetd";
  write_file(dir / "sweep" / "sweep.json", state.dump());
  r = run_wick(again);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("sweep.json: trial 2 has status 'compleetd', not one of "
                                    "pending, running, completed, stopped, failed (did you "
                                    "mean 'completed'?)"));
}

TEST_CASE("wick sweep refuses bad input with exit 2, naming the place") {
  TempDir dir;
  write_file(dir / "cfg.toml", synthetic(dir / "run", 1));
  const auto cfg = (dir / "cfg.toml").string();
  const auto out = (dir / "sweep").string();
  auto r = run_wick({"sweep", cfg, "--param", "optimizer.lrr=log:1e-4:1e-2", "--out", out});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--param optimizer.lrr=log:1e-4:1e-2: unknown key 'lrr'"));
  CHECK_THAT(r.err, Catch::Contains("did you mean 'lr'?"));
  r = run_wick({"sweep", cfg, "--param", "trainr.epochs=[1, 2]", "--out", out});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("did you mean 'trainer'?"));
  r = run_wick({"sweep", cfg, "--param", "optimizer.lr=log:0:1", "--out", out});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--param optimizer.lr=log:0:1: a log range needs LO > 0"));
  r = run_wick({"sweep", cfg, "--param", "optimizer.lr=log:1e-4:1e-2", "--grid", "--out", out});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--grid needs the number of points"));
  // Nothing ran for those.
  CHECK_FALSE(fs::exists(dir / "sweep" / "trial-001"));
  r = run_wick(
      {"sweep", cfg, "--param", "optimizer.lr=[0.001]", "--metric", "valid/los", "--out", out});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--metric valid/los: trial 1's epoch records have no such "
                                    "value"));
  CHECK_THAT(r.err, Catch::Contains("did you mean 'valid/loss'?"));
}

TEST_CASE("wick sweep refuses bad options, and auto batch sizes with several ranks, with exit 2") {
  TempDir dir;
  write_file(dir / "cfg.toml", synthetic(dir / "run", 1));
  const auto cfg = (dir / "cfg.toml").string();
  const std::vector<std::string> lr = {"--param", "optimizer.lr=[0.001]"};
  auto sweep = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"sweep", cfg, "--out", (dir / "sweep").string()};
    args.insert(args.end(), more.begin(), more.end());
    return run_wick(args);
  };
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "needs at least one --param"},
      {{"--param", "optimizer.lr=[0.001]", "--mode", "best"}, "--mode must be min or max"},
      {{"--param", "optimizer.lr=[0.001]", "--jobs", "0"}, "--jobs must be at least 1"},
      {{"--param", "optimizer.lr=[0.001]", "--trials", "0"}, "--trials must be at least 1"},
      {{"--param", "optimizer.lr=[0.001]", "--halving", "--eta", "1"}, "--eta must be at least 2"},
      {{"--param", "optimizer.lr=[0.001]", "--min-epochs", "0"}, "--min-epochs must be at least 1"},
      {{"--param", "optimizer.lr=[0.001]", "--param", "optimizer.lr=[0.01]"}, "is swept twice"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = sweep(args);
    INFO(message);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(message));
  }
  CHECK_FALSE(fs::exists(dir / "sweep"));
  // A folder holding something else than a sweep's state.
  write_file(dir / "sweep" / "sweep.json", "{}");
  auto r = sweep(lr);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("sweep.json is not a sweep's state"));

  // Ranks probing apart could choose apart: a number is asked for.
  r = run_wick({"fit", cfg, "--auto-batch-size"}, {"WORLD_SIZE=2", "RANK=0", "LOCAL_RANK=0",
                                                   "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(cfg + ": trainer.batch_size = \"auto\" probes one process "
                                          "alone"));
  CHECK_FALSE(fs::exists(dir / "run" / "summary.json"));
}
