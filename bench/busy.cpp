// Busy neighbour (README: Threads): training while other processes hold half of the cores, as
// on a shared server or beside a build. Rows, each a separate process on the same load:
// wick's default (trainer.threads = "auto"), wick with
// threads = 1 and threads = every core (both fixed), and the plain PyTorch loop a Python user
// writes (bench/python_loop.py, on the torch of this build: the wheel's 2.11 beside the default
// LibTorch) with PyTorch's default threads and wait policy. The hogs are
// spinning child processes, one per two cores. Samples/s of the Fashion-MNIST MLP (mlp.toml).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "common.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

// Spinning processes: started before the rows, ended after them.
struct Hogs {
  std::vector<pid_t> pids;
  explicit Hogs(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid < 0) throw std::runtime_error("busy: fork failed");
      if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;) x = x + 1;
      }
      pids.push_back(pid);
    }
  }
  ~Hogs() {
    for (pid_t p : pids) kill(p, SIGKILL);
    for (pid_t p : pids) waitpid(p, nullptr, 0);
  }
};

}  // namespace

json run_busy(Settings& s) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    s.notes.push_back("busy: skipped, no Fashion-MNIST data (dataset-fashion-mnist)");
    return {{"skipped", "no Fashion-MNIST data"}};
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores < 2) return {{"skipped", "one core: no other core for a neighbour"}};
  const int hogs = std::max(1, cores / 2);
  const long steps = s.smoke ? 20 : 600;  // batches of 64: a few seconds at full speed
  const int rounds = s.smoke ? 1 : 3;
  const fs::path dir = fs::path(s.work_dir) / "busy";
  fs::create_directories(dir);
  const std::string cfg =
      (fs::path(s.source_dir) / "samples" / "fashion_mnist" / "mlp.toml").string();
  // "K" alone takes K out of the child's environment (glibc's putenv): each row starts from
  // the user's defaults, not from what this process was given.
  const std::vector<std::string> clean = {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"};
  auto wick_fit = [&](const std::string& name, const std::string& threads) {
    const fs::path out = dir / name;
    std::vector<std::string> argv{s.wick_bin,
                                  "fit",
                                  cfg,
                                  "--set",
                                  "trainer.output_dir=\"" + out.string() + "\"",
                                  "--set",
                                  "trainer.epochs=1",
                                  "--set",
                                  "trainer.max_steps=" + std::to_string(steps)};
    if (!threads.empty()) argv.insert(argv.end(), {"--set", "trainer.threads=" + threads});
    auto r = run_child(argv, clean);
    if (r.exit_code != 0) throw std::runtime_error("busy: wick fit " + cfg + ": " + r.err);
    return read_summary(out.string()).samples_per_s;
  };
  // The torch of this build (bench/CMakeLists.txt): the wheel's for LibTorch 2.x.
  auto py_env = clean;
  const std::string torch_path = WICK_BENCH_TORCH_PYTHONPATH;
  if (!torch_path.empty()) py_env.push_back("PYTHONPATH=" + torch_path);
  std::string torch_version;
  int torch_threads = 0;
  auto python = [&] {
    auto r = run_child(
        {WICK_BENCH_PYTHON, (fs::path(s.source_dir) / "bench" / "python_loop.py").string(),
         "--model", "mlp", "--steps", std::to_string(s.smoke ? 20 : 150), "--threads", "0"},
        py_env);
    if (r.exit_code != 0)
      throw std::runtime_error(
          "busy: bench/python_loop.py failed (python3-torch installed? "
          "scripts/install-deps.sh): " +
          r.err);
    const auto j = json::parse(r.out);
    torch_version = j.value("torch", "");
    torch_threads = j.value("threads", 0);
    return j.at("samples_per_s").get<double>();
  };
  std::vector<double> def, one, all, py;
  {
    Hogs busy(hogs);
    for (int i = 0; i < rounds; ++i) {
      def.push_back(wick_fit("default_" + std::to_string(i), ""));
      one.push_back(wick_fit("one_" + std::to_string(i), "1"));
      all.push_back(wick_fit("all_" + std::to_string(i), std::to_string(cores)));
      py.push_back(python());
    }
  }
  const auto d = make_stats(def), o = make_stats(one), a = make_stats(all), p = make_stats(py);
  const double best_fixed = std::max(o.median, a.median);
  return {{"config", "samples/fashion_mnist/mlp.toml"},
          {"cores", cores},
          {"hogs", hogs},
          {"steps", steps},
          {"rounds", rounds},
          {"wick_default_samples_per_s", d.to_json()},
          {"wick_threads_1_samples_per_s", o.to_json()},
          {"wick_threads_all_samples_per_s", a.to_json()},
          {"pytorch_default_samples_per_s", p.to_json()},
          {"pytorch", torch_version},
          {"pytorch_threads", torch_threads},
          {"default_vs_best_fixed", best_fixed > 0 ? d.median / best_fixed : 0},
          {"default_vs_pytorch_default", p.median > 0 ? d.median / p.median : 0}};
}

}  // namespace wick::bench
