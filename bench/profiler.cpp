// The profiler's cost: the reference MLP (784-256-128-10, batch 64, Adam, one thread) on
// generated data, `wick fit` with and without --profile in alternating rounds; the overhead is
// each round's samples/s without over with, less 1. Also how much of the step the profiled
// phases account for (profile.json's phases_s / step_s).
#include "common.hpp"
#include "wick/files.hpp"

namespace fs = std::filesystem;

namespace wick::bench {

json run_profiler(Settings& s) {
  const int rounds = s.smoke ? 1 : 7;
  const long samples = s.smoke ? 2048 : 20000;
  const fs::path dir = fs::path(s.work_dir) / "profiler";
  fs::create_directories(dir);
  write_file_atomic((dir / "mlp.toml").string(),
                    "[trainer]\nepochs = 1\nseed = 0\nbatch_size = 64\nthreads = 1\n"
                    "log_every = 50\n[task]\nplugin = \"synthetic\"\nsamples = " +
                        std::to_string(samples) +
                        "\nvalid_samples = 0\nfeatures = 784\nclasses = 10\n"
                        "hidden = [256, 128]\n[optimizer]\nname = \"adam\"\nlr = 1e-3\n");
  auto fit = [&](bool profile, const fs::path& out) {
    std::vector<std::string> argv = {s.wick_bin, "fit", (dir / "mlp.toml").string(), "--set",
                                     "trainer.output_dir=\"" + out.string() + "\""};
    if (profile) argv.push_back("--profile");
    auto r = run_child(argv);
    if (r.exit_code != 0) throw std::runtime_error("profiler: wick fit: " + r.err);
    return read_summary(out.string()).samples_per_s;
  };
  std::vector<double> off, on, overhead, covered, step_ms;
  for (int i = 0; i < rounds; ++i) {
    const fs::path a = dir / ("off_" + std::to_string(i)), b = dir / ("on_" + std::to_string(i));
    // Alternated order, so that neither side always runs first on a warming machine.
    double x = 0, y = 0;
    if (i % 2 == 0) x = fit(false, a);
    y = fit(true, b);
    if (i % 2 != 0) x = fit(false, a);
    off.push_back(x);
    on.push_back(y);
    overhead.push_back(x / y - 1);
    const auto p = json::parse(read_text(b / "profile.json"));
    covered.push_back(p["phases_s"].get<double>() / p["step_s"].get<double>());
    step_ms.push_back(1e3 * p["step_s"].get<double>() / p["steps"].get<double>());
  }
  return {{"samples", samples},
          {"rounds", rounds},
          {"off_samples_per_s", make_stats(off).to_json()},
          {"on_samples_per_s", make_stats(on).to_json()},
          {"overhead", make_stats(overhead).to_json()},
          {"phases_share_of_step", make_stats(covered).to_json()},
          {"step_ms", make_stats(step_ms).to_json()}};
}

}  // namespace wick::bench
