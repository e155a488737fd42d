// Seeing inside a run (issue 18): the tensorboard plugin's event files read back by an
// independent reader, the profiler, the model summary, FLOPs counted from shapes.
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <charconv>
#include <clocale>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <wick/config.hpp>
#include <wick/loader.hpp>
#include <wick/model_summary.hpp>
#include <wick/tensor_files.hpp>
#include <wick/trainer.hpp>

#include "loop/flops.hpp"
#include "ops/gelu_mlp.hpp"
#include "ops/linear.hpp"
#include "support.hpp"

using namespace wick::test;

namespace {

// A synthetic run: 256 samples, batch 32 (8 steps an epoch), a record every step.
std::string config(const TempDir& d, const std::string& extra, int epochs = 2) {
  return "[trainer]\nepochs = " + std::to_string(epochs) +
         "\nbatch_size = 32\nlog_every = 1\nseed = 0\noutput_dir = \"" + (d / "run").string() +
         "\"\n[task]\nplugin = \"synthetic\"\nsamples = 256\nvalid_samples = 64\n" + extra +
         test_plugins_toml();
}

fs::path event_file(const TempDir& d) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(d / "run"))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      found.push_back(e.path());
  REQUIRE(found.size() == 1);
  return found[0];
}

nlohmann::json read_events(const fs::path& file) {
  auto r = run(
      {kPython, std::string(WICK_SOURCE_DIR) + "/tests/support/read_tfevents.py", file.string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

// (step -> value) of one tag's scalars; a step seen twice fails.
std::map<std::int64_t, double> scalars(const nlohmann::json& events, const std::string& tag) {
  std::map<std::int64_t, double> out;
  for (const auto& e : events)
    for (const auto& v : e["values"])
      if (v["tag"] == tag && v.contains("simple_value")) {
        const std::int64_t step = e.value("step", 0);
        INFO(tag << " at step " << step);
        CHECK(out.count(step) == 0);
        out[step] = v["simple_value"].get<double>();
      }
  return out;
}

// Every value of every record of metrics.jsonl is in the event file, as a float32, at the
// record's step: step records under their names, epoch records under "epoch/" (valid/*
// as they are).
void check_records_match(const TempDir& d, const nlohmann::json& events) {
  const auto records = read_jsonl(d / "run" / "metrics.jsonl");
  std::size_t step_records = 0;
  for (const auto& rec : records) {
    const bool epoch = rec["kind"] == "epoch";
    step_records += epoch ? 0 : 1;
    for (const auto& [k, v] : rec.items()) {
      if (k == "kind" || k == "epoch" || k == "step" || k == "samples_seen" || k == "time_s")
        continue;
      const std::string tag = epoch && k.rfind("valid/", 0) != 0 ? "epoch/" + k : k;
      const auto got = scalars(events, tag);
      const std::int64_t step = rec["step"];
      INFO(tag << " at step " << step);
      REQUIRE(got.count(step) == 1);
      CHECK(got.at(step) == static_cast<double>(static_cast<float>(v.get<double>())));
    }
  }
  // No step twice: as many train/loss scalars as step records.
  CHECK(scalars(events, "train/loss").size() == step_records);
}

}  // namespace

TEST_CASE(
    "tensorboard: the event file read back by an independent reader holds every record "
    "of metrics.jsonl, the resolved config and histograms") {
  TempDir d;
  write_file(d / "cfg.toml",
             config(d, "[[hooks]]\nplugin = \"tensorboard\"\nhistograms_every = 4\nbins = 10\n"));
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.seed=3"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  const auto events = read_events(event_file(d));
  REQUIRE(!events.empty());
  CHECK(events[0]["file_version"] == "brain.Event:2");
  check_records_match(d, events);
  CHECK(scalars(events, "train/loss").size() == 16);

  // The config with its --set value, as a text summary.
  bool config_seen = false;
  for (const auto& e : events)
    for (const auto& v : e["values"])
      if (v["tag"] == "config") {
        config_seen = true;
        CHECK(v["plugin"] == "text");
        CHECK(v["tensor_dtype"] == 7);  // DT_STRING
        const std::string text = v["text"][0];
        CHECK_THAT(text, Catch::Contains("seed = 3"));
        CHECK_THAT(text, Catch::Contains("plugin = 'tensorboard'") ||
                             Catch::Contains("plugin = \"tensorboard\""));
      }
  CHECK(config_seen);

  // Histograms of every parameter and its gradient at steps 4, 8, 12, 16; each counts all of
  // the tensor's values, and its buckets add up to that.
  std::map<std::string, std::set<std::int64_t>> hist_steps;
  for (const auto& e : events)
    for (const auto& v : e["values"])
      if (v.contains("histo")) {
        const auto& h = v["histo"];
        hist_steps[v["tag"]].insert(e["step"].get<std::int64_t>());
        double total = 0;
        for (double c : h["bucket"]) total += c;
        CHECK(total == h["num"].get<double>());
        CHECK(h["bucket_limit"].size() == h["bucket"].size());
        CHECK(h["min"].get<double>() <= h["max"].get<double>());
        CHECK(h["bucket_limit"].back().get<double>() == h["max"].get<double>());
      }
  const std::set<std::int64_t> expected = {4, 8, 12, 16};
  // The synthetic MLP (16 -> 32 -> 4): two Linear layers.
  for (const char* t : {"weights/0.weight", "weights/0.bias", "grads/0.weight", "grads/2.bias"}) {
    INFO(t);
    CHECK(hist_steps[t] == expected);
  }
  CHECK(hist_steps.size() == 8);

  // The reader checks the CRCs: a flipped byte is found.
  auto bytes = read_file(event_file(d));
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
  write_file(d / "corrupt", bytes);
  auto bad = run({kPython, std::string(WICK_SOURCE_DIR) + "/tests/support/read_tfevents.py",
                  (d / "corrupt").string()});
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.err, Catch::Contains("CRC mismatch"));
}

TEST_CASE(
    "tensorboard: after kill -9 and resume the event file holds each step once, as "
    "metrics.jsonl") {
  TempDir d;
  const std::string hooks =
      "[[hooks]]\nplugin = \"tensorboard\"\n[[hooks]]\nplugin = \"checkpoint\"\n"
      "every_n_steps = 4\n";
  write_file(d / "cfg.toml",
             config(d, hooks + "[[hooks]]\nplugin = \"fault\"\naction = \"kill\"\nstep = 11\n"));
  auto killed = run_wick({"fit", (d / "cfg.toml").string()});
  REQUIRE(killed.exit_code == 128 + SIGKILL);
  // Steps 1..11 (the fault kills in after_step, after the step's record), as flushed.
  const auto before = read_events(event_file(d));
  check_records_match(d, before);
  CHECK(scalars(before, "train/loss").size() == 11);
  write_file(d / "cfg.toml", config(d, hooks));
  auto resumed = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest"});
  INFO(resumed.err << resumed.out);
  REQUIRE(resumed.exit_code == 0);
  const auto events = read_events(event_file(d));
  check_records_match(d, events);
  CHECK(scalars(events, "train/loss").size() == 16);
}

TEST_CASE("tensorboard: runs sharing one dir replace their own event files, no one else's") {
  TempDir d;
  const auto logdir = d / "tb";
  write_file(logdir / "events.out.tfevents.1700000000.otherhost.12.v2", "another tool's");
  auto fit_into = [&](const std::string& run) {
    write_file(
        d / "cfg.toml",
        config(d, "[[hooks]]\nplugin = \"tensorboard\"\ndir = \"" + logdir.string() + "\"\n", 1));
    auto r = run_wick({"fit", (d / "cfg.toml").string(), "--set",
                       "trainer.output_dir=\"" + (d / run).string() + "\""});
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
  };
  auto files = [&] {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(logdir)) out.insert(e.path().filename().string());
    return out;
  };
  fit_into("a");
  const auto after_a = files();
  REQUIRE(after_a.size() == 2);
  fit_into("b");
  const auto after_b = files();
  REQUIRE(after_b.size() == 3);  // a's stays
  fit_into("a");                 // replaces its own only
  const auto after_a2 = files();
  CHECK(after_a2.size() == 3);
  CHECK(after_a2.count("events.out.tfevents.1700000000.otherhost.12.v2") == 1);
  for (const auto& f : after_b)
    if (!after_a.count(f)) CHECK(after_a2.count(f) == 1);  // b's
  for (const auto& f : after_a)
    if (f.find(".wick") != std::string::npos) CHECK(after_a2.count(f) == 0);  // a's first

  // Two instances of one run into one folder: the second would replace the first's file as an
  // earlier fit's, and double each curve. Refused before training, naming both.
  write_file(d / "two.toml", config(d,
                                    "[[hooks]]\nplugin = \"tensorboard\"\nname = \"tb1\"\n"
                                    "[[hooks]]\nplugin = \"tensorboard\"\nname = \"tb2\"\n",
                                    1));
  auto two = run_wick({"fit", (d / "two.toml").string()});
  CHECK(two.exit_code == 2);
  CHECK_THAT(two.err, Catch::Contains("hooks 'tb1' and 'tb2' (plugin 'tensorboard') both write "
                                      "event files to '" +
                                      fs::weakly_canonical(d / "run").string() +
                                      "'; give one of them another dir"));
}

TEST_CASE("profiler: every hook, stage handler and phase timed, and the phases cover the steps") {
  TempDir d;
  write_file(d / "cfg.toml",
             config(d,
                    "[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 1.0\n"
                    "[[hooks]]\nplugin = \"early_stopping\"\nmonitor = \"valid/loss\"\n",
                    3));
  auto r = run_wick({"fit", (d / "cfg.toml").string(), "--profile"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("wick: profile (rank 0)"));
  CHECK_THAT(r.err, Catch::Contains("their phases sum to"));
  const auto p = read_json(d / "run" / "profile.json");
  const auto s = read_json(d / "run" / "summary.json");
  REQUIRE(s.contains("profile"));
  CHECK(s["profile"]["steps"] == 24);
  CHECK(p["steps"] == 24);
  std::map<std::string, nlohmann::json> rows;
  for (const auto& e : p["entries"]) rows[e["name"].get<std::string>()] = e;
  for (const char* phase : {"data", "forward", "loss", "backward", "optimizer", "hooks"}) {
    INFO(phase);
    REQUIRE(rows.count(phase));
    CHECK(rows[phase]["kind"] == "phase");
    CHECK(rows[phase]["total_s"].get<double>() > 0);
  }
  // Every phase of every step timed (a phase left untimed would leave its time to the loop).
  for (const char* phase : {"data", "forward", "loss", "backward", "optimizer"}) {
    INFO(phase);
    CHECK(rows[phase]["calls"] == 24);
  }
  CHECK(rows["validation"]["calls"] == 3);
  CHECK(rows["records"]["calls"] == 24);  // log_every = 1
  // Each stage handler once per step, and the defaults at the end of the chains.
  CHECK(rows["grad_clip @ optimizer_step"]["kind"] == "stage");
  CHECK(rows["grad_clip @ optimizer_step"]["calls"] == 24);
  CHECK(rows["default @ optimizer_step"]["calls"] == 24);
  CHECK(rows["default @ backward"]["calls"] == 24);
  CHECK(rows["default @ forward"]["calls"] == 24 + 3 * 2);  // and 2 validation batches a time
  CHECK(rows["early_stopping @ after_epoch"]["kind"] == "point");
  CHECK(rows["early_stopping @ after_epoch"]["calls"] == 3);
  // A handler's own time excludes the rest of its chain (the optimizer's step).
  CHECK(rows["grad_clip @ optimizer_step"]["total_s"].get<double>() <
        rows["optimizer"]["total_s"].get<double>());
  // The phases lie inside the steps. How much of a step's time they hold is a timing, which a
  // busy machine changes (a time slice lost between two phases): the calls above are checked.
  const double step_s = p["step_s"], phases_s = p["phases_s"];
  INFO("steps " << step_s << " s, phases " << phases_s << " s");
  CHECK(phases_s <= step_s);

  // Off: nothing timed, nothing written.
  TempDir off;
  write_file(off / "cfg.toml", config(off, ""));
  auto r2 = run_wick({"fit", (off / "cfg.toml").string()});
  REQUIRE(r2.exit_code == 0);
  CHECK_FALSE(read_json(off / "run" / "summary.json").contains("profile"));
  CHECK_FALSE(fs::exists(off / "run" / "profile.json"));
  CHECK_THAT(r2.err, !Catch::Contains("profile"));

  // As a hook in the config, `wick describe` says so.
  write_file(off / "p.toml", config(off, "[[hooks]]\nplugin = \"profiler\"\n"));
  auto desc = run_wick({"describe", (off / "p.toml").string()});
  REQUIRE(desc.exit_code == 0);
  CHECK_THAT(desc.out, Catch::Contains("Profiled (asked by profiler)"));
}

TEST_CASE("model summary: parameters per module, trainable or frozen, and bytes") {
  torch::nn::Sequential net(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3),
                            torch::nn::Linear(3, 2));
  net[2]->as<torch::nn::Linear>()->weight.set_requires_grad(false);  // 6 frozen
  const auto rows = wick::module_rows(*net);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].type == "Sequential");
  CHECK(rows[0].params == 15 + 6 + 8);
  CHECK(rows[0].trainable == 29 - 6);
  // float32 parameters and running statistics, and the int64 batch counter.
  CHECK(rows[0].bytes == 29 * 4 + 6 * 4 + 8);
  CHECK(rows[1].name == "0");
  CHECK(rows[1].type == "Linear");
  CHECK(rows[1].params == 15);
  CHECK(rows[2].type == "BatchNorm1d");
  CHECK(rows[2].params == 6);
  CHECK(rows[2].bytes == 6 * 4 + 6 * 4 + 8);
  CHECK(rows[3].trainable == 2);
  const auto text = wick::model_summary(*net);
  CHECK_THAT(text, Catch::Contains("29 parameters (23 trainable, 6 frozen), 148 bytes"));

  // `wick describe` and `wick fit` show the task's model: 16 -> 32 -> 4 is 676 parameters.
  TempDir d;
  write_file(d / "cfg.toml", config(d, "", 1));
  auto desc = run_wick({"describe", (d / "cfg.toml").string()});
  INFO(desc.err << desc.out);
  REQUIRE(desc.exit_code == 0);
  CHECK_THAT(desc.out, Catch::Contains("676 parameters (676 trainable, 0 frozen)"));
  auto fit = run_wick({"fit", (d / "cfg.toml").string()});
  REQUIRE(fit.exit_code == 0);
  CHECK_THAT(fit.out, Catch::StartsWith("Model Sequential: 676 parameters"));
}

TEST_CASE("FLOPs: matrix products and convolutions counted from their shapes") {
  torch::NoGradGuard g;
  auto conv = torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1));
  auto lin = torch::nn::Linear(5, 4);
  double conv_flops = 0, lin_flops = 0, mm_flops = 0, nested = 0;
  {
    wick::FlopCounter c;
    conv(torch::randn({2, 3, 10, 10}));
    conv_flops = c.flops();
  }
  {
    wick::FlopCounter c;
    lin(torch::randn({3, 5}));
    lin_flops = c.flops();
    // Its shape kept for the peak probe: [3, 5] x [5, 4] in float32.
    REQUIRE(c.matmuls().size() == 1);
    const auto& m = c.matmuls()[0];
    CHECK((m.b == 1 && m.m == 3 && m.k == 5 && m.n == 4));
    CHECK(m.dtype == static_cast<int>(torch::kFloat));
  }
  {
    wick::FlopCounter c;
    (void)torch::matmul(torch::randn({2, 3, 4}), torch::randn({4, 5}));
    mm_flops = c.flops();
    CHECK(mm_flops == 2.0 * 6 * 4 * 5);  // folded into one [6, 4] x [4, 5] product
    {
      wick::FlopCounter inner;  // a nested counter takes over, then gives back
      (void)torch::mm(torch::randn({2, 2}), torch::randn({2, 2}));
      nested = inner.flops();
    }
    (void)torch::mm(torch::randn({2, 3}), torch::randn({3, 1}));
    mm_flops = c.flops() - mm_flops;
  }
  // 2 x 8 x 10 x 10 outputs, each 3 x 3 x 3 multiply-adds, plus the bias.
  CHECK(conv_flops == 2.0 * 1600 * 27 + 1600);
  // [3, 5] x [5, 4] and the bias.
  CHECK(lin_flops == 2.0 * 3 * 5 * 4 + 3 * 4);
  CHECK(nested == 2.0 * 2 * 2 * 2);
  CHECK(mm_flops == 2.0 * 2 * 3 * 1);  // the second product only: the first was before
  {
    wick::FlopCounter c;
    (void)torch::relu(torch::randn({100}));
    CHECK(c.flops() == 0);  // elementwise work is not counted
  }
}

TEST_CASE("FLOPs: an op with a backward counts three times its forward, no-grad work once") {
  // Style transfer runs a frozen feature network under no_grad beside a trained image: its
  // products have no backward, and counting them as if they had one put
  // train/flops_utilization at 1.98.
  auto lin = torch::nn::Linear(5, 4);
  const double fwd = 2.0 * 3 * 5 * 4 + 3 * 4;  // [3, 5] x [5, 4] and the bias
  {
    wick::FlopCounter c;  // trained weights: dW and db in backward
    lin(torch::randn({3, 5}));
    CHECK(c.flops() == fwd);
    CHECK(c.train_flops() == 3 * fwd);
    CHECK(c.matmuls().at(0).backward);
  }
  {
    wick::FlopCounter c;
    torch::NoGradGuard g;  // the frozen network's forward
    lin(torch::randn({3, 5}));
    CHECK(c.flops() == fwd);
    CHECK(c.train_flops() == fwd);
    CHECK_FALSE(c.matmuls().at(0).backward);
  }
  {
    wick::FlopCounter c;  // nothing needs a gradient: no backward either
    (void)torch::mm(torch::randn({2, 3}), torch::randn({3, 4}));
    CHECK(c.train_flops() == c.flops());
    // The image being trained is an input that needs one: a backward runs.
    (void)torch::mm(torch::randn({2, 3}, torch::requires_grad()), torch::randn({3, 4}));
    CHECK(c.train_flops() == 2.0 * 2 * 3 * 4 + 3 * 2.0 * 2 * 3 * 4);
  }
  // wick's own autograd functions (wick::linear and gelu_mlp in bf16 on a GPU) run their
  // products with grad mode off inside; their backward runs all the same.
  const auto w = lin->weight.detach(), b = lin->bias.detach();
  const auto trained = w.clone().requires_grad_();
  {
    wick::FlopCounter c;
    (void)wick::linear_in(torch::kFloat, torch::randn({3, 5}), trained, b);
    CHECK(c.flops() == fwd);
    CHECK(c.train_flops() == 3 * fwd);
    CHECK(c.matmuls().at(0).backward);
  }
  {
    wick::FlopCounter c;  // nothing trains: counted once
    (void)wick::linear_in(torch::kFloat, torch::randn({3, 5}), w, b);
    CHECK(c.train_flops() == fwd);
  }
  {
    wick::FlopCounter c;  // both products, trained
    (void)wick::gelu_mlp_in(torch::kFloat, torch::randn({3, 5}), trained, b, torch::randn({2, 4}),
                            torch::zeros({2}));
    const double both = fwd + 2.0 * 3 * 4 * 2 + 3 * 2;
    CHECK(c.flops() == both);
    CHECK(c.train_flops() == 3 * both);
  }
}

TEST_CASE(
    "FLOPs: the Fashion-MNIST MLP's step is (6 x its weights + 3 x its biases) x batch, logged as "
    "a rate and as "
    "utilization of the probed peak") {
  TempDir d;
  write_file(d / "cfg.toml",
             "[trainer]\nepochs = 1\nbatch_size = 64\nlog_every = 10\nmax_steps = 40\n"
             "output_dir = \"" +
                 (d / "run").string() +
                 "\"\n[task]\nplugin = \"fashion_mnist\"\nmodel = \"mlp\"\nhidden = [256, 128]\n"
                 "limit = 2560\n[[hooks]]\nplugin = \"progress\"\nmode = \"plain\"\n");
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  // Shown as people read rates: "... 1.2 GFLOP/s  3.4% of peak", not raw doubles.
  const auto done = r.out.find("epoch 1/1 done");
  REQUIRE(done != std::string::npos);
  const auto line = r.out.substr(done, r.out.find('\n', done) - done);
  CHECK_THAT(line, Catch::Matches(".* [0-9.]+ [kMGTPE]?FLOP/s  [0-9.]+% of peak.*"));
  CHECK_THAT(r.out, !Catch::Contains("train/flops_per_s"));
  const auto s = read_json(d / "run" / "summary.json");
  // 784-256-128-10: 234,752 weights (2 FLOPs a sample each), 394 biases (1), all three times.
  const double hand = (6.0 * 234752 + 3.0 * 394) * 64;
  const double got = s["flops_per_step"];
  INFO("counted " << got << ", hand " << hand);
  CHECK(got == hand);  // counted exactly, op by op
  CHECK(s["peak_gflops"].get<double>() > 0);
  const auto recs = read_jsonl(d / "run" / "metrics.jsonl");
  REQUIRE(recs.size() == 5);  // steps 10, 20, 30 and 40, the epoch
  for (const auto& rec : recs) {
    INFO(rec.dump());
    CHECK(rec["train/flops_per_s"].get<double>() > 0);
    // The rate against the peak probed on the step's own products. Whether a step stays
    // under the probe's rate is a timing (a busy machine can slow the probe alone), so what
    // is checked is the arithmetic: one process, so the rate over the summary's peak.
    const double util = rec["train/flops_utilization"].get<double>();
    const double expect =
        rec["train/flops_per_s"].get<double>() / (s["peak_gflops"].get<double>() * 1e9);
    CHECK(util > 0);
    CHECK(std::abs(util - expect) <= 1e-9 * expect);
  }
  CHECK(recs[4]["peak_rss_mb"].get<double>() > 10);

  // Off: no count, no rates.
  TempDir off;
  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--set", "trainer.flops=false", "--set",
                      "trainer.output_dir=\"" + (off / "run").string() + "\""});
  REQUIRE(r2.exit_code == 0);
  CHECK_FALSE(read_json(off / "run" / "summary.json").contains("flops_per_step"));
  CHECK_FALSE(read_jsonl(off / "run" / "metrics.jsonl")[0].contains("train/flops_per_s"));
}

TEST_CASE("values wrong on their face in the new keys are refused, naming the file and key") {
  TempDir d;
  struct Bad {
    std::string extra, key, section, say;
  };
  std::vector<Bad> cases = {
      {"[[hooks]]\nplugin = \"tensorboard\"\nhistograms_every = -1\n", "histograms_every",
       "[hooks.tensorboard]", "must be >= 0"},
      {"[[hooks]]\nplugin = \"tensorboard\"\nbins = 0\n", "bins", "[hooks.tensorboard]",
       "must be between 1 and 10000"},
      {"[[hooks]]\nplugin = \"profiler\"\nfile = \"\"\n", "file", "[hooks.profiler]",
       "must not be empty"},
      {"[[hooks]]\nplugin = \"profiler\"\ntop = -2\n", "top", "[hooks.profiler]", "must be >= 0"},
      {"[[hooks]]\nplugin = \"profiler\"\nkernels = -1\n", "kernels", "[hooks.profiler]",
       "must be >= 0"},
      {"[[hooks]]\nplugin = \"profiler\"\nkernel_steps = 0\n", "kernel_steps", "[hooks.profiler]",
       "must be >= 1"},
      {"[[hooks]]\nplugin = \"profiler\"\nkernel_after = -1\n", "kernel_after", "[hooks.profiler]",
       "must be >= 0"},
      {"[[hooks]]\nplugin = \"profiler\"\nclock = \"hots\"\n", "clock", "[hooks.profiler]",
       "did you mean \"host\"?"},
      // Files of the run's own, which they would overwrite, and a folder.
      {"[[hooks]]\nplugin = \"profiler\"\nfile = \"summary.json\"\n", "file", "[hooks.profiler]",
       "is the run's own summary.json, which the trainer writes; give another file name"},
      {"[[hooks]]\nplugin = \"metrics_log\"\nfile = \"./metrics.jsonl\"\n", "file",
       "[hooks.metrics_log]", "is the run's own metrics.jsonl"},
      {"[[hooks]]\nplugin = \"metrics_log\"\nfile = \"logs/..\"\n", "file", "[hooks.metrics_log]",
       "not a file; give a file name"},
      // 255 bytes: a name the file system takes, but not with the write's ".tmp".
      {"[[hooks]]\nplugin = \"metrics_log\"\nfile = \"" + std::string(251, 'm') + ".csv\"\n",
       "file", "[hooks.metrics_log]",
       "is a file name of 255 bytes; with the '.tmp' its writes add it passes the file system's "
       "255: give a shorter one"},
  };
  if (TORCH_VERSION_MAJOR < 2)  // no kernel table on LibTorch 1.13
    cases.push_back({"[[hooks]]\nplugin = \"profiler\"\nkernels = 5\n", "kernels",
                     "[hooks.profiler]", "needs LibTorch 2.x; set it to 0"});
  for (const auto& c : cases) {
    write_file(d / "cfg.toml", config(d, c.extra));
    auto r = run_wick({"check", (d / "cfg.toml").string()});
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains((d / "cfg.toml").string() + ":"));
    CHECK_THAT(r.err, Catch::Contains("'" + c.key + "'"));
    CHECK_THAT(r.err, Catch::Contains(c.section));
    CHECK_THAT(r.err, Catch::Contains(c.say));
  }
  write_file(d / "cfg.toml", config(d, ""));
  auto r = run_wick({"check", (d / "cfg.toml").string(), "--set", "trainer.peak_gflops=-1"});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("'peak_gflops'"));
  CHECK_THAT(r.err, Catch::Contains("[trainer]"));
  CHECK_THAT(r.err, Catch::Contains("must be >= 0"));
}

TEST_CASE("the profiler and metrics_log write into a folder of the run they create") {
  TempDir d;
  write_file(d / "cfg.toml", config(d,
                                    "[[hooks]]\nplugin = \"profiler\"\nfile = \"prof/p.json\"\n"
                                    "[[hooks]]\nplugin = \"metrics_log\"\nfile = \"logs/m.csv\"\n",
                                    1));
  auto r = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(read_json(d / "run" / "prof" / "p.json").contains("phases_s"));
  CHECK_THAT(read_file(d / "run" / "logs" / "m.csv"), Catch::StartsWith("kind,epoch,step"));
}

TEST_CASE("a host program's decimal-comma locale changes no number wick reads or writes") {
  struct Restore {
    std::string was = std::setlocale(LC_ALL, nullptr);
    ~Restore() { std::setlocale(LC_ALL, was.c_str()); }
  } restore;
  if (!std::setlocale(LC_ALL, "de_DE.UTF-8"))
    skip("needs the de_DE.UTF-8 locale (scripts/install-deps.sh makes it)");
  char probe[16];
  std::snprintf(probe, sizeof probe, "%.1f", 0.5);
  REQUIRE(std::string(probe) == "0,5");  // the locale is in effect
  TempDir d;
  // Float defaults of the trainer and of a plugin (lr_schedule's), parsed back as TOML; lr and
  // losses written to metrics.csv.
  auto cfg = wick::Config::parse(config(d,
                                        "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosine\"\n"
                                        "[[hooks]]\nplugin = \"metrics_log\"\n",
                                        1),
                                 (d / "cfg.toml").string());
  auto trainer = wick::make_trainer(cfg, wick::PluginFinder({WICK_PLUGIN_DIR}));
  REQUIRE(trainer->fit().status == wick::FitResult::Status::completed);
  const std::string csv = read_file(d / "run" / "metrics.csv");
  CHECK(csv.find('"') == std::string::npos);  // no cell quoted for a comma of its own
  // The lr column's first value reads back as a number of the C locale.
  std::istringstream lines(csv);
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  const auto cells = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) out.push_back(c);
    return out;
  };
  const auto names = cells(header), values = cells(row);
  const auto at = std::find(names.begin(), names.end(), "lr") - names.begin();
  REQUIRE(at < static_cast<std::ptrdiff_t>(values.size()));
  const std::string lr = values[static_cast<std::size_t>(at)];
  double v = 0;
  const auto got = std::from_chars(lr.data(), lr.data() + lr.size(), v);
  CHECK(got.ptr == lr.data() + lr.size());
  CHECK(v > 0);
  CHECK(v <= 0.001);
  // A .csv of numbers, written and read back.
  const auto t = torch::tensor({{0.5f, -1.25f}, {3.0f, 1e-3f}});
  wick::write_tensor_file((d / "t.csv").string(), t);
  CHECK(read_file(d / "t.csv").find("0.5,-1.25") != std::string::npos);
  write_file(d / "in.csv", "a,b\n0.5,-1.25\n3,0.001\n");
  CHECK(torch::equal(wick::read_tensor_file((d / "in.csv").string()), t));
}
