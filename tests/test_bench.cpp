// `wick_bench --smoke` runs every section and writes results.json (with the keys the report
// reads) and results.md. Timings are not checked: only that each section produced numbers.
#include "support.hpp"

using namespace wick::test;

TEST_CASE("wick_bench --smoke runs every section and writes its results") {
  TempDir dir;
  const auto out = dir / "results.json";
  auto r = run({WICK_BENCH_BIN, "--smoke", "--out", out.string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto j = read_json(out);
  for (const char* key :
       {"meta", "parity", "memory", "dispatch", "callgrind", "startup", "ddp", "targets"})
    CHECK(j.contains(key));
  CHECK_FALSE(j.contains("error"));

  const auto& p = j["parity"];
  for (const char* side : {"in_process", "processes"}) {
    INFO(side);
    CHECK(p[side]["wick_samples_per_s"]["median"].get<double>() > 0);
    CHECK(p[side]["hand_samples_per_s"]["median"].get<double>() > 0);
    CHECK(p[side]["pair_ratios"]["median"].get<double>() > 0);
    CHECK(p[side]["balanced_ratios"]["median"].get<double>() > 0);
    if (std::string(side) == "in_process")
      CHECK(p[side]["cpu_pair_ratios"]["median"].get<double>() > 0);
    // Same data, same initial weights, same batch order: the hand-written loop must end with
    // exactly wick's weights, or the comparison is not like with like.
    CHECK(p[side]["same_final_weights"] == true);
  }
  CHECK(j["memory"]["wick_peak_rss_mb"]["median"].get<double>() > 0);
  CHECK(j["memory"]["hand_peak_rss_mb"]["median"].get<double>() > 0);

  const auto& rows = j["dispatch"]["rows"];
  REQUIRE(rows.size() == 4);
  int hooks[] = {0, 1, 8, 32};
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(rows[i]["hooks"] == hooks[i]);
    CHECK(rows[i]["trainer"]["median"].get<double>() > 0);
    CHECK(rows[i]["plain_std_function"]["median"].get<double>() >= 0);
  }
  CHECK(j["dispatch"]["unsubscribed_point_ns"]["median"].get<double>() > 0);

  CHECK(j["startup"]["plugins"] == 10);
  CHECK(j["startup"]["describe_wall_s"]["median"].get<double>() > 0);
  CHECK(j["startup"]["per_plugin_load_ms"].size() >= 10);

  // Data-parallel scaling: both workloads ran (the Fashion-MNIST data is one of the packages
  // the install script puts in place), with the ddp plugin's breakdown.
  REQUIRE(j.contains("ddp"));
  INFO(j["ddp"].dump());
  REQUIRE_FALSE(j["ddp"].contains("skipped"));
  for (const char* w : {"cnn", "mlp"}) {
    INFO(w);
    CHECK(j["ddp"][w]["ratio"]["median"].get<double>() > 0);
    CHECK(j["ddp"][w]["independent_pair_ratio"]["median"].get<double>() > 0);
    CHECK(j["ddp"][w]["ddp"]["buckets"].get<double>() >= 1);
    CHECK(j["ddp"][w]["ddp"]["compute_ms"]["median"].get<double>() > 0);
  }
  // The CNN's gradients: the fully connected layers in the first bucket, started during
  // backward; the convolutions in the second.
  CHECK(j["ddp"]["cnn"]["ddp"]["buckets"] == 2);
  CHECK(j["ddp"]["cnn"]["ddp"]["started_during_backward_per_step"] == 1.0);

  CHECK(j["loader"]["ratio"]["median"].get<double>() > 0);
  CHECK(j["loader"]["workers_2_samples_per_s"]["median"].get<double>() > 0);

  // The metric plugins' updates: a share of the eval step, timed in alternating rounds.
  CHECK(j["metrics"]["share"]["median"].get<double>() > 0);
  CHECK(j["metrics"]["updates_us"]["median"].get<double>() > 0);
  CHECK(j["torchscript"]["ratio"]["median"].get<double>() > 0);
  // A rank killed, every rank trained again: seconds, and at least one step done again.
  CHECK(j["restart"]["recovery_s"]["median"].get<double>() > 0);
  CHECK(j["restart"]["steps_redone"]["median"].get<double>() >= 1);

  // --profile against without: samples/s of both, and how much of the step the phases cover.
  CHECK(j["profiler"]["on_samples_per_s"]["median"].get<double>() > 0);
  const double covered = j["profiler"]["phases_share_of_step"]["median"];
  CHECK(covered > 0.5);
  CHECK(covered <= 1.0);

  // The Python peers: both sides trained, on the same data.
  for (const char* m : {"cnn", "mlp"}) {
    CHECK(j["python"][m]["wick_samples_per_s"]["median"].get<double>() > 0);
    CHECK(j["python"][m]["python_samples_per_s"]["median"].get<double>() > 0);
  }

  // A busy neighbour: every row trained while the hogs spun.
  for (const char* row : {"wick_default", "wick_threads_1", "wick_threads_all", "pytorch_default"})
    CHECK(j["busy"][std::string(row) + "_samples_per_s"]["median"].get<double>() > 0);
  CHECK(j["busy"]["hogs"].get<int>() >= 1);

  // The peers section runs where its Python environment is installed (scripts/install-peers.sh):
  // then every workload has its rows and four targets (the GAN three: no HF Trainer row; the
  // GPT three: no hand-written loop, so no tax).
  std::size_t targets = 15;
  if (!j["peers"].contains("skipped")) {
    for (const char* w : {"mlp", "cnn", "transformer", "gan", "gpt"}) {
      INFO(w);
      REQUIRE(j["peers"][w]["rows"].size() >= 5);
      for (const auto& row : j["peers"][w]["rows"])
        CHECK(row["samples_per_s"]["median"].get<double>() > 0);
    }
    targets += 18;  // gpt has no hand-written loop: no tax target
  }
  REQUIRE(j["targets"].size() == targets);
  for (const auto& t : j["targets"]) {
    CHECK(t.contains("name"));
    CHECK(t.contains("value"));
    CHECK(t.contains("met"));
  }
  const auto md = read_file(dir / "results.md");
  CHECK(md.find("| Measure |") != std::string::npos);
  CHECK(r.out == md);  // the same table on stdout
}

// --only re-measures one section; the others stay, each with the date it was measured on,
// carried from the file before (or "on or before" that file's date where it gave none).
TEST_CASE("wick_bench --only keeps the other sections with the dates they were measured on") {
  TempDir dir;
  const auto out = dir / "results.json";
  write_file(out, R"({"meta": {"date": "2026-01-02 03:04 UTC",
                               "measured": {"old_a": "2025-12-31 23:59 UTC"}},
                      "old_a": {"x": 1}, "old_b": {"y": 2}})");
  auto r = run({WICK_BENCH_BIN, "--smoke", "--only", "startup", "--out", out.string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  const auto j = read_json(out);
  CHECK(j["old_a"]["x"] == 1);
  CHECK(j["old_b"]["y"] == 2);
  const auto& measured = j["meta"]["measured"];
  // This run's sections carry its CPU (the machine's model and vector features).
  const std::string cpu = j["meta"]["cpu"];
  CHECK(cpu.find(" (") != std::string::npos);
  CHECK(measured["startup"] == j["meta"]["date"].get<std::string>() + " on " + cpu);
  CHECK(measured["old_a"] == "2025-12-31 23:59 UTC");
  CHECK(measured["old_b"] == "on or before 2026-01-02 03:04 UTC");
  const auto notes = j["meta"]["notes"].dump();
  CHECK(notes.find("measured by an earlier run (2025-12-31 23:59 UTC), kept: old_a") !=
        std::string::npos);
  CHECK(notes.find("(on or before 2026-01-02 03:04 UTC), kept: old_b") != std::string::npos);

  // A section it does not have is refused before anything runs, and the file stays as it was.
  const auto before = read_file(out);
  r = run({WICK_BENCH_BIN, "--smoke", "--only", "startup,startpu", "--out", out.string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--only: no section 'startpu'") != std::string::npos);
  CHECK(r.err.find("memory_tools,python,busy,peers]") != std::string::npos);  // the usage
  CHECK(read_file(out) == before);
}
