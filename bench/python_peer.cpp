// wick against the plain PyTorch loop a Python user writes (bench/python_loop.py, Debian's
// python3-torch 1.13): the same Fashion-MNIST images, models, optimizer and batch, one thread
// each, separate processes in alternated order. wick trains the sample configs as shipped
// (samples/fashion_mnist/cnn.toml: channels_last and mixed_precision dtype = "auto", so bf16
// on a CPU with native bf16; mlp.toml: fp32) and the Python loop in fp32, its defaults. The
// ratio is each round's train samples/s, wick over Python.
#include <filesystem>

#include "common.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

// `steps` batches of one epoch, or with epochs > 0 that many whole epochs.
json peer(Settings& s, const std::string& model, long steps, long epochs, int rounds) {
  const fs::path dir = fs::path(s.work_dir) / ("python_" + model);
  fs::create_directories(dir);
  const std::string cfg =
      (fs::path(s.source_dir) / "samples" / "fashion_mnist" / (model + ".toml")).string();
  auto wick_fit = [&](int i) {
    const fs::path out = dir / ("wick_" + std::to_string(i));
    std::vector<std::string> argv{s.wick_bin,
                                  "fit",
                                  cfg,
                                  "--set",
                                  "trainer.threads=1",
                                  "--set",
                                  "trainer.output_dir=\"" + out.string() + "\"",
                                  "--set"};
    if (epochs > 0) {
      argv.push_back("trainer.epochs=" + std::to_string(epochs));
    } else {
      argv.insert(argv.end(), {"trainer.epochs=1", "--set"});
      argv.push_back("trainer.max_steps=" + std::to_string(steps));
    }
    auto r = run_child(argv);
    if (r.exit_code != 0) throw std::runtime_error("python: wick fit " + cfg + ": " + r.err);
    return read_summary(out.string()).samples_per_s;
  };
  auto python = [&] {
    auto r = run_child(
        {WICK_BENCH_PYTHON, (fs::path(s.source_dir) / "bench" / "python_loop.py").string(),
         "--model", model, epochs > 0 ? "--epochs" : "--steps",
         std::to_string(epochs > 0 ? epochs : steps), "--threads", "1"},
        {"OMP_NUM_THREADS=1"});
    if (r.exit_code != 0)
      throw std::runtime_error(
          "python: bench/python_loop.py failed (python3-torch installed? "
          "scripts/install-deps.sh): " +
          r.err);
    return json::parse(r.out).at("samples_per_s").get<double>();
  };
  std::vector<double> w, p, ratio;
  for (int i = 0; i < rounds; ++i) {
    const bool wick_first = i % 2 == 0;
    double a = 0, b = 0;
    if (wick_first) a = wick_fit(i);
    b = python();
    if (!wick_first) a = wick_fit(i);
    w.push_back(a);
    p.push_back(b);
    ratio.push_back(a / b);
  }
  return {{"config", "samples/fashion_mnist/" + model + ".toml"},
          {"steps", steps},
          {"epochs", epochs},
          {"rounds", rounds},
          {"wick_samples_per_s", make_stats(w).to_json()},
          {"python_samples_per_s", make_stats(p).to_json()},
          {"ratio", make_stats(ratio).to_json()}};
}

}  // namespace

json run_python(Settings& s) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    s.notes.push_back("python: skipped, no Fashion-MNIST data (dataset-fashion-mnist)");
    return {{"skipped", "no Fashion-MNIST data"}};
  }
  const int rounds = s.smoke ? 1 : 5;
  // At full size 5 to 10 s of training per process: the MLP needs whole epochs for that.
  return {{"cnn", peer(s, "cnn", s.smoke ? 10 : 400, 0, rounds)},
          {"mlp", peer(s, "mlp", s.smoke ? 20 : 0, s.smoke ? 0 : 3, rounds)}};
}

}  // namespace wick::bench
