// Data-parallel scaling: train samples/s of `wick fit --nproc 2` (two ranks, one intra-op
// thread each) against `wick fit` (one rank, one thread), same per-rank batch, on the CNN and
// the MLP workloads (bench/ddp_cnn.toml, bench/ddp_mlp.toml). Each round runs both, in
// alternating order, plus two independent one-rank processes at once: what two busy cores
// give without any communication, the ceiling for the 2-rank run on this machine. The ddp
// plugin's own per-step breakdown (compute, communication, wait) comes from its last line.
#include <filesystem>
#include <fstream>
#include <regex>

#include "common.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

double samples_per_s(const fs::path& run) {
  return read_summary(run.string()).samples_per_s;
}

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

// The ddp plugin's summary line, as printed by rank 0 at the end of the fit.
struct DdpLine {
  bool found = false;
  double buckets = 0, max_floats = 0, early = 0, compute = 0, comm = 0, wait = 0;
};
DdpLine parse_ddp_line(const std::string& err) {
  static const std::regex re(
      R"(in (\d+) bucket\(s\) of (\d+) floats max, \d+ gradient all-reduces \(\d+ bucket\(s\) by )"
      R"(exchange, ([\d.]+) started)"
      R"([^:]*: per step compute ([\d.]+) ms, comm ([\d.]+) ms \(of which wait ([\d.]+) ms\))");
  std::smatch m;
  DdpLine d;
  if (!std::regex_search(err, m, re)) return d;
  d.found = true;
  d.buckets = std::stod(m[1]);
  d.max_floats = std::stod(m[2]);
  d.early = std::stod(m[3]);
  d.compute = std::stod(m[4]);
  d.comm = std::stod(m[5]);
  d.wait = std::stod(m[6]);
  return d;
}

json measure(Settings& s, const std::string& name, const std::string& config, long limit,
             int rounds) {
  const fs::path dir = fs::path(s.work_dir) / ("ddp_" + name);
  fs::create_directories(dir);
  auto fit_argv = [&](const fs::path& out, bool two) {
    std::vector<std::string> a = {s.wick_bin, "fit", config};
    if (two) a.insert(a.end(), {"--nproc", "2"});
    a.insert(a.end(), {"--set", "trainer.threads=1", "--set", "task.limit=" + std::to_string(limit),
                       "--set", "trainer.output_dir=\"" + out.string() + "\""});
    return a;
  };
  auto check = [](const ChildResult& r, const char* what) {
    if (r.exit_code != 0)
      throw std::runtime_error(std::string("ddp bench: ") + what + " failed (exit " +
                               std::to_string(r.exit_code) + "): " + r.err.substr(0, 2000));
  };

  std::vector<double> one, two, pair, ratio, pair_ratio, compute, comm, wait;
  DdpLine last;
  for (int r = 0; r < rounds; ++r) {
    double r1 = 0, r2 = 0;
    // Alternating which runs first spreads slow drifts of the machine over both sides.
    for (int k = 0; k < 2; ++k) {
      const bool run_two = (k == 0) == (r % 2 == 1);
      if (run_two) {
        auto c = run_child(fit_argv(dir / "two", true));
        check(c, "the 2-rank run");
        r2 = samples_per_s(dir / "two");
        last = parse_ddp_line(c.err);
        if (last.found) {
          compute.push_back(last.compute);
          comm.push_back(last.comm);
          wait.push_back(last.wait);
        }
      } else {
        check(run_child(fit_argv(dir / "one", false)), "the 1-rank run");
        r1 = samples_per_s(dir / "one");
      }
    }
    // Two independent one-rank fits at once (no communication).
    // Each side's exit status is checked (a bare `wait` would hide a failure), and last round's
    // summaries go first, so that a failed run cannot pass off an old number.
    std::string cmd;
    for (const char* side : {"pa", "pb"}) {
      fs::remove(dir / side / "summary.json");
      for (const auto& a : fit_argv(dir / side, false)) cmd += quoted(a) + " ";
      cmd += std::string(">/dev/null 2>&1 & ") + side + "=$!; ";
    }
    cmd += "wait $pa && wait $pb";
    check(run_child({"/bin/sh", "-c", cmd}), "the independent pair");
    const double rp = samples_per_s(dir / "pa") + samples_per_s(dir / "pb");
    one.push_back(r1);
    two.push_back(r2);
    pair.push_back(rp);
    ratio.push_back(r2 / r1);
    pair_ratio.push_back(rp / r1);
  }
  json out = {{"config", config},
              {"limit", limit},
              {"rounds", rounds},
              {"one_rank_samples_per_s", make_stats(one).to_json()},
              {"two_ranks_samples_per_s", make_stats(two).to_json()},
              {"independent_pair_samples_per_s", make_stats(pair).to_json()},
              {"ratio", make_stats(ratio).to_json()},
              {"independent_pair_ratio", make_stats(pair_ratio).to_json()}};
  if (last.found)
    out["ddp"] = {{"buckets", last.buckets},
                  {"max_bucket_floats", last.max_floats},
                  {"started_during_backward_per_step", last.early},
                  {"compute_ms", make_stats(compute).to_json()},
                  {"comm_ms", make_stats(comm).to_json()},
                  {"wait_ms", make_stats(wait).to_json()}};
  return out;
}

}  // namespace

json run_ddp(Settings& s) {
  const bool built = fs::exists(fs::path(s.plugin_dir) / "wick_fashion_mnist.so") &&
                     fs::exists(fs::path(s.plugin_dir) / "wick_ddp.so");
  // The fashion_mnist task's default data_dir (Debian's dataset-fashion-mnist).
  const bool data = fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
  if (!built || !data) {
    const std::string why = !built
                                ? "the fashion_mnist or ddp plugin is not built"
                                : "no Fashion-MNIST data (apt-get install dataset-fashion-mnist)";
    s.notes.push_back("ddp scaling skipped: " + why);
    return {{"skipped", why}};
  }
  const int rounds = s.smoke ? 1 : s.ddp_rounds;
  const fs::path src(s.source_dir);
  // CNN: 200 steps of 64 for one rank, 100 per rank for two; MLP: 480 and 240.
  return {{"cnn",
           measure(s, "cnn", (src / "bench/ddp_cnn.toml").string(), s.smoke ? 256 : 12800, rounds)},
          {"mlp", measure(s, "mlp", (src / "bench/ddp_mlp.toml").string(), s.smoke ? 256 : 30720,
                          rounds)}};
}

}  // namespace wick::bench
