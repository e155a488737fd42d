// Memory tools (section memory_tools): what activation checkpointing and sharded optimizer
// state save, and what they cost in time, each against the plain run measured in the same
// rounds, alternating which goes first.
// - Activation checkpointing: a deep MLP (synthetic task, 256 inputs, 12 blocks of Linear
//   1024 + ReLU + Dropout, batch 512, Adam) trained with `wick fit --profile`, plain and with
//   `activation_checkpointing` over every block; peaks per phase from summary.json's "memory"
//   (the CPU tensor bytes LibTorch's allocator reports) and samples/s.
// - Sharded optimizer state: `wick fit --nproc 2` of the MLP workload of the ddp section
//   (bench/ddp_mlp.toml: 784-256-128-10, Adam), plain ddp, shard_optimizer (ZeRO-1) and
//   shard_gradients (ZeRO-2); each rank's optimizer-state bytes from the ddp plugin's last
//   line, samples/s (and so step time) from the summary.
#include <filesystem>
#include <fstream>
#include <regex>

#include "common.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

void check(const ChildResult& r, const std::string& what) {
  if (r.exit_code != 0)
    throw std::runtime_error("memory_tools bench: " + what + " failed (exit " +
                             std::to_string(r.exit_code) + "): " + r.err.substr(0, 2000));
}

// The largest CPU peak of a phase in summary.json's "memory", in MiB.
double phase_peak_mib(const json& summary, const std::string& phase) {
  for (const auto& p : summary.at("memory").at("phases"))
    if (p.at("name") == phase) return p.at("cpu_peak_bytes").get<double>() / (1024.0 * 1024.0);
  return -1;
}

json checkpointing(Settings& s, int rounds) {
  const fs::path dir = fs::path(s.work_dir) / "recompute";
  fs::create_directories(dir);
  const std::string blocks = s.smoke ? "[64, 64]"
                                     : "[1024, 1024, 1024, 1024, 1024, 1024, "
                                       "1024, 1024, 1024, 1024, 1024, 1024]";
  const std::string cfg =
      "[trainer]\nepochs = 1\nseed = 0\nbatch_size = 512\nthreads = 1\nlog_every = 100\n"
      "[task]\nplugin = \"synthetic\"\nfeatures = 256\nclasses = 10\nvalid_samples = 512\n"
      "samples = " +
      std::string(s.smoke ? "1024" : "8192") + "\nhidden = " + blocks +
      "\ndropout = 0.1\n[optimizer]\nname = \"adam\"\nlr = 1e-3\n";
  std::ofstream(dir / "plain.toml") << cfg;
  std::ofstream(dir / "ckpt.toml")
      << cfg << "[[hooks]]\nplugin = \"activation_checkpointing\"\nmodules = [\"*\"]\n";
  std::map<std::string, std::vector<double>> fwd, bwd, rate;
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      const std::string side = (k == 0) == (r % 2 == 0) ? "plain" : "ckpt";
      const fs::path out = dir / ("run_" + side);
      check(run_child({s.wick_bin, "fit", (dir / (side + ".toml")).string(), "--profile", "--set",
                       "trainer.output_dir=\"" + out.string() + "\""}),
            "the " + side + " run");
      const auto summary = json::parse(read_text(out / "summary.json"));
      fwd[side].push_back(phase_peak_mib(summary, "forward"));
      bwd[side].push_back(phase_peak_mib(summary, "backward"));
      rate[side].push_back(read_summary(out.string()).samples_per_s);
    }
  json out = {{"model",
               "synthetic MLP 256 -> 12 x (Linear 1024, ReLU, Dropout 0.1) -> 10, "
               "batch 512, Adam"},
              {"rounds", rounds}};
  for (const char* side : {"plain", "ckpt"})
    out[side] = {{"forward_peak_mib", make_stats(fwd[side]).to_json()},
                 {"backward_peak_mib", make_stats(bwd[side]).to_json()},
                 {"samples_per_s", make_stats(rate[side]).to_json()}};
  out["forward_peak_ratio"] = make_stats(fwd["ckpt"]).median / make_stats(fwd["plain"]).median;
  out["backward_peak_ratio"] = make_stats(bwd["ckpt"]).median / make_stats(bwd["plain"]).median;
  out["samples_per_s_ratio"] = make_stats(rate["ckpt"]).median / make_stats(rate["plain"]).median;
  return out;
}

json sharding(Settings& s, int rounds) {
  const fs::path dir = fs::path(s.work_dir) / "zero";
  fs::create_directories(dir);
  const std::string config = (fs::path(s.source_dir) / "bench/ddp_mlp.toml").string();
  const std::vector<std::pair<std::string, std::vector<std::string>>> sides = {
      {"ddp", {}},
      {"zero1", {"hooks.ddp.shard_optimizer=true"}},
      {"zero2", {"hooks.ddp.shard_optimizer=true", "hooks.ddp.shard_gradients=true"}}};
  static const std::regex re(R"(ddp: rank (\d) holds (\d+) bytes of optimizer state)");
  std::map<std::string, std::vector<double>> rate;
  std::map<std::string, std::vector<long long>> bytes;
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < sides.size(); ++k) {
      const auto& [name, sets] = sides[(k + static_cast<std::size_t>(r)) % sides.size()];
      const fs::path out = dir / name;
      std::vector<std::string> argv = {s.wick_bin,
                                       "fit",
                                       config,
                                       "--nproc",
                                       "2",
                                       "--set",
                                       "trainer.threads=1",
                                       "--set",
                                       "task.limit=" + std::string(s.smoke ? "256" : "30720"),
                                       "--set",
                                       "trainer.output_dir=\"" + out.string() + "\""};
      for (const auto& x : sets) argv.insert(argv.end(), {"--set", x});
      const auto c = run_child(argv);
      check(c, "the " + name + " run");
      rate[name].push_back(read_summary(out.string()).samples_per_s);
      std::vector<long long> b(2, -1);
      for (std::sregex_iterator it(c.err.begin(), c.err.end(), re), end; it != end; ++it)
        b[std::stoul((*it)[1])] = std::stoll((*it)[2]);
      bytes[name] = b;
    }
  json out = {{"config", config}, {"rounds", rounds}};
  const double base = make_stats(rate["ddp"]).median;
  for (const auto& [name, sets] : sides) {
    const double med = make_stats(rate[name]).median;
    out[name] = {{"samples_per_s", make_stats(rate[name]).to_json()},
                 {"samples_per_s_ratio", med / base},
                 {"optimizer_state_bytes_rank0", bytes[name][0]},
                 {"optimizer_state_bytes_rank1", bytes[name][1]}};
  }
  return out;
}

}  // namespace

json run_memory_tools(Settings& s) {
  const int rounds = s.smoke ? 1 : 3;
  json out;
  out["activation_checkpointing"] = checkpointing(s, rounds);
  const bool data = fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") &&
                    fs::exists(fs::path(s.plugin_dir) / "wick_fashion_mnist.so");
  if (data)
    out["sharding"] = sharding(s, rounds);
  else
    s.notes.push_back("memory_tools: sharding skipped (no Fashion-MNIST data or plugin)");
  return out;
}

}  // namespace wick::bench
