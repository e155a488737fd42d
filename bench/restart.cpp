// Recovery from a rank's death: `wick launch --nproc 2 --max-restarts 1` trains the ddp MLP
// (bench/ddp_mlp.toml, a checkpoint every 20 steps, a step record every step); once it is
// training, rank 1 gets kill -9. Measured: seconds from the kill to the first step record of
// the restarted ranks (a step record is written once every rank has done the step). What it
// costs: ending the other rank, starting both processes again (LibTorch loads), the
// rendezvous, reading the checkpoint.
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "common.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

// Step records in a metrics.jsonl (0 when it does not exist).
int step_records(const fs::path& file) {
  std::ifstream in(file);
  int n = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"kind\":\"step\"") != std::string::npos) ++n;
  return n;
}

// The pid of the rank started with the marker variable `tag` in its environment, or -1.
pid_t rank_pid(const std::string& tag, int rank) {
  const std::string want_rank = "RANK=" + std::to_string(rank);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "environ", std::ios::binary);
    bool tagged = false, ranked = false;
    for (std::string v; std::getline(in, v, '\0');) {
      tagged = tagged || v == tag;
      ranked = ranked || v == want_rank;
    }
    if (tagged && ranked) return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// Alive and not a zombie.
bool running(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

template <class F>
bool wait_until(F done, double timeout_s) {
  const auto t0 = Clock::now();
  while (!done()) {
    if (seconds_since(t0) > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

json run_restart(Settings& s) {
  const fs::path dir = fs::path(s.work_dir) / "restart";
  fs::create_directories(dir);
  std::ifstream base(fs::path(s.source_dir) / "bench" / "ddp_mlp.toml");
  std::stringstream cfg;
  cfg << base.rdbuf() << "\n[[hooks]]\nplugin = \"checkpoint\"\nevery_n_steps = 20\n";
  std::ofstream(dir / "cfg.toml") << cfg.str();

  const int rounds = s.smoke ? 1 : 3;
  std::vector<double> recovery;
  std::vector<double> lost;
  for (int r = 0; r < rounds; ++r) {
    const fs::path run = dir / ("run" + std::to_string(r));
    const fs::path metrics = run / "metrics.jsonl";
    const std::string tag = "WICK_BENCH_RESTART=" + run.string();
    const std::vector<std::string> argv = {s.wick_bin,
                                           "launch",
                                           "--nproc",
                                           "2",
                                           "--max-restarts",
                                           "1",
                                           "--grace",
                                           "2",
                                           "--",
                                           s.wick_bin,
                                           "fit",
                                           (dir / "cfg.toml").string(),
                                           "--set",
                                           "trainer.log_every=1",
                                           "--set",
                                           "trainer.output_dir=\"" + run.string() + "\""};
    auto launched = std::async(std::launch::async, [&] { return run_child(argv, {tag}); });
    auto fail = [&](const std::string& what) {
      if (const pid_t p = rank_pid(tag, 0); p > 0) ::kill(p, SIGKILL);
      if (const pid_t p = rank_pid(tag, 1); p > 0) ::kill(p, SIGKILL);
      const auto c = launched.get();
      throw std::runtime_error("restart bench: " + what +
                               "; wick launch said: " + c.err.substr(0, 2000));
    };
    // Training, past the first checkpoint.
    if (!wait_until([&] { return step_records(metrics) >= 30; }, 120))
      fail("no 30 step records within 120 s");
    const pid_t r0 = rank_pid(tag, 0), r1 = rank_pid(tag, 1);
    if (r0 <= 0 || r1 <= 0) fail("cannot find the ranks' processes");
    const auto t_kill = Clock::now();
    ::kill(r1, SIGKILL);
    // Once the old rank 0 is gone, its records go aside: the restart's first step record is
    // then the first in a new file.
    if (!wait_until([&] { return !running(r0); }, 60)) fail("rank 0 did not end");
    const int before = step_records(metrics);
    fs::rename(metrics, run / "metrics.killed.jsonl");
    if (!wait_until([&] { return step_records(metrics) >= 1; }, 120))
      fail("no step record within 120 s of the restart");
    recovery.push_back(seconds_since(t_kill));
    const auto c = launched.get();
    if (c.exit_code != 0 || c.err.find("restart 1 of 1") == std::string::npos)
      throw std::runtime_error("restart bench: the run did not complete after one restart (exit " +
                               std::to_string(c.exit_code) + "): " + c.err.substr(0, 2000));
    // Steps done again: those after the checkpoint the restart resumed from.
    std::ifstream first(metrics);
    std::string line;
    std::getline(first, line);
    const auto at = line.find("\"step\":");
    const long resumed_step = at == std::string::npos ? 0 : std::stol(line.substr(at + 7)) - 1;
    lost.push_back(static_cast<double>(before - resumed_step));
  }
  auto rec = make_stats(recovery);
  return {{"rounds", rounds},
          {"checkpoint_every_n_steps", 20},
          {"recovery_s", rec.to_json()},
          {"steps_redone", make_stats(lost).to_json()}};
}

}  // namespace wick::bench
