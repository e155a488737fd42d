// Start-up: wall time of `wick describe` with ten plugins (a task and nine hooks) against
// `wick --version` (process start plus LibTorch and libwick, no plugin), and the load time of
// each plugin library measured in a fresh process.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common.hpp"
#include "wick/loader.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> libraries_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".so") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

json run_startup(Settings& s) {
  json out;
  const int reps = s.smoke ? 1 : 7;
  const fs::path dir = fs::path(s.work_dir) / "startup";
  fs::create_directories(dir);

  // Ten plugins: the Fashion-MNIST task and nine of the built-in hooks when they are built,
  // else the synthetic task and nine no-op hooks built for this benchmark.
  const int hooks = 9;
  const std::vector<std::pair<std::string, std::string>> real = {
      {"progress", ""},
      {"metrics_log", ""},
      {"checkpoint", ""},
      {"grad_accum", "steps = 2\n"},
      {"mixed_precision", "dtype = \"bf16\"\n"},
      {"grad_clip", "max_norm = 1.0\n"},
      {"lr_schedule", "kind = \"cosine\"\n"},
      {"ema", ""},
      {"early_stopping", "monitor = \"valid/loss\"\n"}};
  auto built = [&](const std::string& name) {
    return fs::exists(fs::path(s.plugin_dir) / ("wick_" + name + ".so"));
  };
  bool use_real = built("fashion_mnist");
  for (const auto& [name, params] : real) use_real = use_real && built(name);
  const fs::path cfg = dir / "describe10.toml";
  std::string last_hook;
  {
    std::ofstream f(cfg);
    if (use_real) {
      f << "[task]\nplugin = \"fashion_mnist\"\n";
      for (const auto& [name, params] : real)
        f << "\n[[hooks]]\nplugin = \"" << name << "\"\n" << params;
      last_hook = real.back().first;
    } else {
      f << "[plugins]\npath = [\"" << s.bench_plugin_dir
        << "\"]\n\n[task]\nplugin = \"synthetic\"\n";
      for (int i = 0; i < hooks; ++i) f << "\n[[hooks]]\nplugin = \"bench_noop_" << i << "\"\n";
      last_hook = "bench_noop_8";
    }
  }
  out["plugin_set"] =
      use_real ? "fashion_mnist task + 9 built-in hooks" : "synthetic task + 9 no-op hooks";
  std::vector<double> describe_s, version_s;
  for (int r = 0; r < reps; ++r) {
    // Alternate so that a burst of load on the machine hits both alike.
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == (r % 2 == 0)) {
        auto c = run_child({s.wick_bin, "describe", cfg.string()});
        if (c.exit_code != 0) throw std::runtime_error("wick describe failed: " + c.err);
        if (c.out.find(last_hook) == std::string::npos)
          throw std::runtime_error("wick describe did not list the ten plugins:\n" + c.out);
        describe_s.push_back(c.wall_s);
      } else {
        auto c = run_child({s.wick_bin, "--version"});
        if (c.exit_code != 0) throw std::runtime_error("wick --version failed: " + c.err);
        version_s.push_back(c.wall_s);
      }
    }
  }
  out["plugins"] = hooks + 1;
  out["config"] = cfg.string();
  out["describe_wall_s"] = make_stats(describe_s).to_json();
  out["version_wall_s"] = make_stats(version_s).to_json();
  const double d = make_stats(describe_s).median, v = make_stats(version_s).median;
  out["plugins_and_config_s"] = d - v;

  // Each library's load time (dlopen and the info check) in one fresh process, after
  // LibTorch is loaded: the built-in plugins and the benchmark's no-op hooks.
  std::vector<std::string> files = libraries_in(s.plugin_dir);
  for (const auto& f : libraries_in(s.bench_plugin_dir)) files.push_back(f);
  if (!files.empty()) {
    std::vector<std::string> argv = {self_exe(), "--load-plugins"};
    argv.insert(argv.end(), files.begin(), files.end());
    auto c = run_child(argv);
    if (c.exit_code != 0) throw std::runtime_error("--load-plugins failed: " + c.err);
    out["per_plugin_load_ms"] = json::parse(c.out);
  }
  std::size_t builtin = libraries_in(s.plugin_dir).size();
  out["builtin_plugins"] = builtin;
  if (!use_real)
    s.notes.push_back("start-up: the built-in plugins are not all built (" +
                      std::to_string(builtin) +
                      " found); `wick describe` used the synthetic task and nine no-op hook "
                      "plugins built for the benchmark (bench/plugins)");
  return out;
}

int load_plugins_main(const std::vector<std::string>& files) {
  json out = json::array();
  for (const auto& f : files) {
    const auto t0 = Clock::now();
    json row = {{"path", f}};
    try {
      auto lib = load_plugin_library(f);
      row["ms"] = seconds_since(t0) * 1e3;
      row["name"] = lib->info().name;
    } catch (const std::exception& e) {
      row["error"] = e.what();
    }
    out.push_back(row);
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace wick::bench
