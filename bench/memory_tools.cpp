// Memory tools (section memory_tools): what activation checkpointing and sharded optimizer
// state save, and what they cost in time, each against the plain run measured in the same
// rounds, alternating which goes first.
// - Activation checkpointing: a deep MLP where activations outweigh the weights (synthetic
//   task, 512 inputs, 12 blocks of Linear 512 + ReLU + Dropout 0.1, batch 4096, Adam) trained
//   with `wick fit --profile`, plain and with `activation_checkpointing` over every block;
//   peaks per phase from summary.json's "memory" (the CPU tensor bytes LibTorch's allocator
//   reports: weights, gradients and Adam's state included) and samples/s.
// - Sharded optimizer state: `wick fit --nproc 2`, plain ddp, shard_optimizer (ZeRO-1) and
//   shard_gradients (ZeRO-2), on the MLP workload of the ddp section (bench/ddp_mlp.toml:
//   784-256-128-10, Adam; its first weight holds 85% of the parameters) and on a deep MLP of
//   equal layers (synthetic, 8 x Linear 512); each rank's optimizer-state bytes from the ddp
//   plugin's last line, samples/s (and so step time) from the summary.
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

// The CPU peak of a phase in summary.json's "memory", in MiB.
double phase_peak_mib(const json& summary, const std::string& phase) {
  for (const auto& p : summary.at("memory").at("phases"))
    if (p.at("name") == phase) return p.at("cpu_peak_bytes").get<double>() / (1024.0 * 1024.0);
  return -1;
}

// "[512, 512, ...]": n hidden layers of 512.
std::string layers(int n) {
  std::string l = "[";
  for (int i = 0; i < n; ++i) l += i ? ", 512" : "512";
  return l + "]";
}

json checkpointing(Settings& s, int rounds) {
  const fs::path dir = fs::path(s.work_dir) / "recompute";
  fs::create_directories(dir);
  const std::string cfg =
      "[trainer]\nepochs = 1\nseed = 0\nbatch_size = 4096\nthreads = 1\nlog_every = 100\n"
      "[task]\nplugin = \"synthetic\"\nfeatures = 512\nclasses = 10\nvalid_samples = 4096\n"
      "samples = " +
      std::string(s.smoke ? "4096" : "16384") + "\nhidden = " + layers(s.smoke ? 2 : 12) +
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
               "synthetic MLP 512 -> 12 x (Linear 512, ReLU, Dropout 0.1) -> 10, "
               "batch 4096, Adam"},
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

// `config` at 2 ranks with `sets`, plain ddp and sharded, in rotated order.
json sharding(Settings& s, const std::string& name, const std::string& config,
              const std::vector<std::string>& sets, int rounds) {
  const fs::path dir = fs::path(s.work_dir) / ("zero_" + name);
  fs::create_directories(dir);
  const std::vector<std::pair<std::string, std::vector<std::string>>> sides = {
      {"ddp", {}},
      {"zero1", {"hooks.ddp.shard_optimizer=true"}},
      {"zero2", {"hooks.ddp.shard_optimizer=true", "hooks.ddp.shard_gradients=true"}}};
  static const std::regex re(R"(ddp: rank (\d) holds (\d+) bytes of optimizer state)");
  std::map<std::string, std::vector<double>> rate;
  std::map<std::string, std::vector<long long>> bytes;
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < sides.size(); ++k) {
      const auto& [side, extra] = sides[(k + static_cast<std::size_t>(r)) % sides.size()];
      const fs::path out = dir / side;
      std::vector<std::string> argv = {s.wick_bin,
                                       "fit",
                                       config,
                                       "--nproc",
                                       "2",
                                       "--set",
                                       "trainer.output_dir=\"" + out.string() + "\""};
      for (const auto& x : sets) argv.insert(argv.end(), {"--set", x});
      for (const auto& x : extra) argv.insert(argv.end(), {"--set", x});
      const auto c = run_child(argv);
      check(c, "the " + name + " " + side + " run");
      rate[side].push_back(read_summary(out.string()).samples_per_s);
      std::vector<long long> b(2, -1);
      for (std::sregex_iterator it(c.err.begin(), c.err.end(), re), end; it != end; ++it)
        b[std::stoul((*it)[1])] = std::stoll((*it)[2]);
      bytes[side] = b;
    }
  json out = {{"config", config}, {"rounds", rounds}};
  const double base = make_stats(rate["ddp"]).median;
  for (const auto& [side, extra] : sides) {
    const double med = make_stats(rate[side]).median;
    out[side] = {{"samples_per_s", make_stats(rate[side]).to_json()},
                 {"samples_per_s_ratio", med / base},
                 {"optimizer_state_bytes_rank0", bytes[side][0]},
                 {"optimizer_state_bytes_rank1", bytes[side][1]}};
  }
  return out;
}

}  // namespace

json run_memory_tools(Settings& s) {
  const int rounds = s.smoke ? 1 : 3;
  json out;
  out["activation_checkpointing"] = checkpointing(s, rounds);
  const std::vector<std::string> one_thread = {"trainer.threads=1"};
  const bool data = fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") &&
                    fs::exists(fs::path(s.plugin_dir) / "wick_fashion_mnist.so");
  if (data) {
    auto sets = one_thread;
    sets.push_back("task.limit=" + std::string(s.smoke ? "256" : "30720"));
    out["sharding"]["mlp"] =
        sharding(s, "mlp", (fs::path(s.source_dir) / "bench/ddp_mlp.toml").string(), sets, rounds);
  } else {
    s.notes.push_back("memory_tools: sharding of the MLP skipped (no Fashion-MNIST data)");
  }
  const fs::path deep = fs::path(s.work_dir) / "zero_deep.toml";
  std::ofstream(deep) << "[trainer]\nepochs = 1\nseed = 0\nbatch_size = 256\nlog_every = 50\n"
                         "[task]\nplugin = \"synthetic\"\nfeatures = 512\nclasses = 10\n"
                         "valid_samples = 256\nsamples = "
                      << (s.smoke ? 512 : 8192) << "\nhidden = " << layers(8)
                      << "\n[optimizer]\nname = \"adam\"\nlr = 1e-3\n"
                         "[[hooks]]\nplugin = \"ddp\"\n";
  out["sharding"]["deep"] = sharding(s, "deep", deep.string(), one_thread, rounds);
  return out;
}

}  // namespace wick::bench
