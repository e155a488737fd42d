// The torchscript task's cost: the MLP of samples/fashion_mnist/mlp.toml (784-256-128-10,
// batch 64, Adam) trained on Fashion-MNIST twice in one run: the built-in C++ model of the
// fashion_mnist task, and the same network written in Python, scripted with python3-torch and
// trained through the torchscript task on the same images saved as .npy files (memory-mapped).
// Separate `wick fit` processes, alternated; the ratio is each round's train samples/s,
// torchscript over C++.
#include <filesystem>

#include "common.hpp"
#include "wick/files.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

// The same images and labels as the fashion_mnist task's (its normalisation), the first
// `limit` training samples; and the MLP, scripted.
const char* const kMake = R"py(
import gzip, os, sys
import numpy as np
import torch
from torch import nn
d, limit = sys.argv[1], int(sys.argv[2])
src = "/usr/share/datasets/fashion-mnist"
def idx(name, offset):
    return np.frombuffer(gzip.decompress(open(f"{src}/{name}", "rb").read())[offset:], dtype=np.uint8)
x = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:limit].astype(np.float32) / 255
x = (x - 0.2860) / 0.3530
y = idx("train-labels-idx1-ubyte.gz", 8)[:limit].astype(np.int64)
os.makedirs(f"{d}/train", exist_ok=True)
np.save(f"{d}/train/input.npy", x.astype(np.float32))
np.save(f"{d}/train/target.npy", y)
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
torch.jit.script(net).save(f"{d}/mlp.pt")
)py";

}  // namespace

json run_torchscript(Settings& s) {
  const int rounds = s.smoke ? 1 : 5;
  const long limit = s.smoke ? 2048 : 30000;
  const fs::path dir = fs::path(s.work_dir) / "torchscript";
  fs::create_directories(dir);
  write_file_atomic((dir / "make.py").string(), kMake);
  auto made = run_child(
      {WICK_BENCH_PYTHON, (dir / "make.py").string(), dir.string(), std::to_string(limit)});
  if (made.exit_code != 0)
    throw std::runtime_error(
        "torchscript: making the scripted MLP failed (python3-torch "
        "installed? scripts/install-deps.sh): " +
        made.err);
  const std::string trainer =
      "[trainer]\nepochs = 1\nseed = 0\nbatch_size = 64\nthreads = 1\nlog_every = 0\n"
      "[optimizer]\nname = \"adam\"\nlr = 1e-3\n";
  write_file_atomic((dir / "cpp.toml").string(),
                    trainer +
                        "[task]\nplugin = \"fashion_mnist\"\nmodel = \"mlp\"\n"
                        "hidden = [256, 128]\nlimit = " +
                        std::to_string(limit) + "\n");
  write_file_atomic((dir / "ts.toml").string(),
                    trainer +
                        "[task]\nplugin = \"torchscript\"\nmodel = \"mlp.pt\"\n"
                        "train = \"train\"\n");
  auto fit = [&](const std::string& cfg, const fs::path& out) {
    auto r = run_child({s.wick_bin, "fit", (dir / cfg).string(), "--set",
                        "trainer.output_dir=\"" + out.string() + "\""});
    if (r.exit_code != 0) throw std::runtime_error("torchscript: wick fit " + cfg + ": " + r.err);
    return read_summary(out.string()).samples_per_s;
  };
  std::vector<double> cpp, ts, ratio;
  for (int i = 0; i < rounds; ++i) {
    // Alternated order, so that neither side always runs first on a warming machine.
    const bool cpp_first = i % 2 == 0;
    double c = 0, t = 0;
    if (cpp_first) c = fit("cpp.toml", dir / ("cpp_" + std::to_string(i)));
    t = fit("ts.toml", dir / ("ts_" + std::to_string(i)));
    if (!cpp_first) c = fit("cpp.toml", dir / ("cpp_" + std::to_string(i)));
    cpp.push_back(c);
    ts.push_back(t);
    ratio.push_back(t / c);
  }
  return {{"samples", limit},
          {"rounds", rounds},
          {"cpp_samples_per_s", make_stats(cpp).to_json()},
          {"torchscript_samples_per_s", make_stats(ts).to_json()},
          {"ratio", make_stats(ratio).to_json()}};
}

}  // namespace wick::bench
