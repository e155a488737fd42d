// Cancels, errors, stop signals and the output folder's lock through `wick fit`, with the thrower
// test plugin injecting them and the recorder noting where after_cancel ran. The synthetic task
// here runs 2 epochs of 2 training batches and 1 validation batch.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "support.hpp"

using namespace wick::test;

extern char** environ;

namespace {

struct Run {
  int exit_code;
  std::string out, err;
  nlohmann::json summary;
  std::vector<std::string> recorded;  // recorder lines without the instance name
};

std::string config(const TempDir& dir, const std::string& thrower) {
  return test_plugins_toml() + "[trainer]\nepochs = 2\nbatch_size = 32\nshuffle = false\n" +
         "log_every = 0\noutput_dir = \"" + (dir / "run").string() + "\"\n" +
         "[task]\nplugin = \"synthetic\"\nsamples = 64\nvalid_samples = 32\nfeatures = 4\n" +
         "hidden = [8]\n" +
         // The recorder (order 0) runs before the thrower (order 10) at a shared point.
         "[[hooks]]\nplugin = \"recorder\"\npath = \"" + (dir / "rec.txt").string() + "\"\n" +
         "[[hooks]]\nplugin = \"thrower\"\n" + thrower;
}

std::vector<std::string> recorded(const TempDir& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir / "rec.txt")) return out;
  std::istringstream in(read_file(dir / "rec.txt"));
  for (std::string l; std::getline(in, l);) out.push_back(l.substr(l.find(' ') + 1));
  return out;
}

Run fit(const TempDir& dir, const std::string& thrower) {
  write_file(dir / "cfg.toml", config(dir, thrower));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  Run out{r.exit_code, r.out, r.err, {}, recorded(dir)};
  if (fs::exists(dir / "run" / "summary.json"))
    out.summary = read_json(dir / "run" / "summary.json");
  return out;
}

long count(const std::vector<std::string>& v, const std::string& s) {
  return std::count(v.begin(), v.end(), s);
}

// Where the line `s` is in v (v.size() when absent).
std::size_t pos(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<std::size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

}  // namespace

TEST_CASE("CancelStep skips the rest of that step and is counted") {
  TempDir dir;
  // The second training batch of epoch 0, before its forward pass.
  auto r = fit(dir, "point = \"before_step\"\nstep = 1\naction = \"cancel_step\"\n");
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.summary["status"] == "completed");
  CHECK(r.summary["cancelled_steps"] == 1);
  CHECK(r.summary["cancelled_epochs"] == 0);
  CHECK(r.summary["optimizer_steps"] == 3);
  CHECK(r.summary["micro_steps"] == 3);
  CHECK(r.summary["samples_seen"] == 96);
  CHECK(r.summary["epochs"] == 2);
  CHECK(count(r.recorded, "after_cancel 0 1") == 1);
  CHECK(count(r.recorded, "after_pred 0 1") == 0);
  CHECK(pos(r.recorded, "after_cancel 0 1") == pos(r.recorded, "before_step 0 1") + 1);
  CHECK(r.recorded.back() == "after_fit 1 0");
}

TEST_CASE("CancelEpoch skips the rest of that epoch's training and is counted") {
  TempDir dir;
  auto r = fit(dir, "point = \"after_step\"\nstep = 0\naction = \"cancel_epoch\"\n");
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.summary["status"] == "completed");
  CHECK(r.summary["cancelled_epochs"] == 1);
  CHECK(r.summary["cancelled_steps"] == 0);
  // The cancelled batch had already stepped (after_step); batch 1 of epoch 0 never ran.
  CHECK(r.summary["optimizer_steps"] == 3);
  CHECK(r.summary["samples_seen"] == 96);
  CHECK(count(r.recorded, "before_step 0 1") == 0);
  CHECK(pos(r.recorded, "after_cancel 0 0") == pos(r.recorded, "after_step 0 0") + 1);
  // Validation and after_epoch still close the epoch.
  CHECK(pos(r.recorded, "before_valid 0 0") == pos(r.recorded, "after_cancel 0 0") + 1);
  CHECK(count(r.recorded, "after_epoch 0 0") == 1);
  CHECK(r.summary.contains("valid/accuracy"));
}

TEST_CASE("CancelEpoch in before_epoch skips that epoch's training only") {
  TempDir dir;
  auto r = fit(dir, "point = \"before_epoch\"\nstep = 1\naction = \"cancel_epoch\"\n");
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.summary["status"] == "completed");
  CHECK(r.summary["cancelled_epochs"] == 1);
  CHECK(r.summary["optimizer_steps"] == 2);
  CHECK(count(r.recorded, "before_step 1 0") == 1);  // validation's
  CHECK(pos(r.recorded, "after_cancel 1 0") == pos(r.recorded, "before_epoch 1 0") + 1);
}

TEST_CASE("CancelFit ends the run as cancelled after after_cancel") {
  TempDir dir;
  auto r = fit(dir, "point = \"after_step\"\nstep = 2\naction = \"cancel_fit\"\n");
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);  // a hook's own decision, not a failure or an interrupt
  CHECK(r.summary["status"] == "cancelled");
  CHECK(r.summary["stop_reason"] ==
        "plugin 'thrower' (instance 'thrower') at after_step: CancelFit");
  CHECK_FALSE(r.summary.contains("error"));
  CHECK(r.summary["optimizer_steps"] == 3);
  CHECK(r.summary["epochs"] == 1);  // epochs completed
  CHECK(r.summary["cancelled_epochs"] == 0);
  CHECK(r.summary["cancelled_steps"] == 0);
  REQUIRE(!r.recorded.empty());
  CHECK(r.recorded.back() == "after_cancel 1 0");
  CHECK(r.recorded[r.recorded.size() - 2] == "after_step 1 0");
  CHECK(count(r.recorded, "after_cancel 1 0") == 1);
  CHECK(count(r.recorded, "after_fit 1 0") == 0);
  CHECK(r.out.find("wick: cancelled") != std::string::npos);
}

TEST_CASE("a stop request ends the run gracefully: completed, no after_cancel") {
  TempDir dir;
  auto r = fit(dir, "point = \"after_step\"\nstep = 0\naction = \"stop\"\n");
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.summary["status"] == "completed");
  CHECK(r.summary["stop_reason"] == "thrower asked to stop");
  CHECK(r.summary["optimizer_steps"] == 1);
  CHECK(count(r.recorded, "after_cancel 0 0") == 0);
  // Validated for the summary, then the fit ends: the epoch it stopped in is not over, so no
  // after_epoch (a resume would continue it at the next batch).
  const std::vector<std::string> tail = {"after_step 0 0", "before_valid 0 0", "before_step 0 0",
                                         "after_pred 0 0", "after_loss 0 0",   "after_step 0 0",
                                         "after_fit 0 0"};
  REQUIRE(r.recorded.size() >= tail.size());
  CHECK(std::vector<std::string>(r.recorded.end() - tail.size(), r.recorded.end()) == tail);
}

TEST_CASE("an exception in a hook fails the run with the plugin and the point named") {
  TempDir dir;
  auto r = fit(dir, "point = \"after_loss\"\nstep = 3\naction = \"throw\"\n");
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  const std::string msg =
      "plugin 'thrower' (instance 'thrower') at after_loss: thrower: injected failure";
  CHECK(r.summary["status"] == "failed");
  CHECK(r.summary["error"] == msg);
  CHECK(r.summary["optimizer_steps"] == 3);
  CHECK(r.err.find("wick: training failed: " + msg) != std::string::npos);
  REQUIRE_FALSE(r.recorded.empty());
  CHECK(r.recorded.back() == "after_cancel 1 1");
  CHECK(count(r.recorded, "after_cancel 1 1") == 1);
}

TEST_CASE("SIGINT raised in a step: the run stops at the next step boundary with exit 130") {
  TempDir dir;
  auto r = fit(dir, "point = \"after_step\"\nstep = 1\naction = \"sigint\"\n");
  INFO(r.err << r.out);
  CHECK(r.exit_code == 130);
  CHECK(r.summary["status"] == "cancelled");
  CHECK(r.summary["stop_reason"] == "interrupted (SIGINT)");
  // The step that saw the signal completes; the next one never starts.
  CHECK(r.summary["optimizer_steps"] == 2);
  CHECK(count(r.recorded, "before_valid 0 0") == 0);
  REQUIRE(r.recorded.size() >= 2);
  CHECK(r.recorded[r.recorded.size() - 2] == "after_step 0 1");
  CHECK(r.recorded.back() == "after_cancel 0 1");
}

TEST_CASE("a run stopped inside its first epoch reports the samples/s of what it trained") {
  TempDir dir;
  write_file(dir / "cfg.toml",
             config(dir, "point = \"after_step\"\nstep = 1\naction = \"sigint\"\n"));
  // 4 batches an epoch: the signal stops it after its second, inside the first epoch, whose
  // time was once counted only when the epoch ended (0 samples/s).
  auto r = run_wick({"fit", (dir / "cfg.toml").string(), "--set", "task.samples=128"});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 130);
  const auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["samples_seen"] == 64);
  CHECK(s["train_samples_per_s"].get<double>() > 0);
}

namespace {

// Starts `wick ARGS...` without waiting; its output goes to files in dir.
pid_t spawn_wick(const TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {WICK_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const auto out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  // The stop signals must reach the child: default disposition, nothing blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, intr;
  sigemptyset(&none);
  sigemptyset(&intr);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&intr, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &intr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start wick");
  return pid;
}

// Waits for the file to appear (the child reached the chosen step), up to 120 s.
bool wait_for(const fs::path& f) {
  for (int i = 0; i < 12000; ++i) {
    if (fs::exists(f)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Starts `wick fit` whose thrower waits in the second step's after_step until a stop signal
// has been handled; returns once it waits there.
pid_t start_paused_fit(const TempDir& dir) {
  const auto marker = dir / "reached";
  write_file(dir / "cfg.toml",
             config(dir, "point = \"after_step\"\nstep = 1\naction = \"pause\"\nmarker = \"" +
                             marker.string() + "\"\n"));
  const pid_t pid = spawn_wick(dir, {"fit", (dir / "cfg.toml").string()});
  REQUIRE(wait_for(marker));
  return pid;
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

TEST_CASE("SIGINT during the last epoch's after_epoch is not lost: exit 130, not completed") {
  TempDir dir;
  // Second (last) after_epoch: the training loop is over, so only the epoch-end check sees it.
  auto r = fit(dir, "point = \"after_epoch\"\nstep = 1\naction = \"sigint\"\n");
  INFO(r.err << r.out);
  CHECK(r.exit_code == 130);
  CHECK(r.summary["status"] == "cancelled");
  CHECK(r.summary["stop_reason"] == "interrupted (SIGINT)");
  CHECK(count(r.recorded, "after_fit 1 0") == 0);
  REQUIRE(!r.recorded.empty());
  CHECK(r.recorded.back().rfind("after_cancel", 0) == 0);
}

TEST_CASE("a stop signal sent to a running `wick fit`: after_cancel, exit 128 + signal") {
  // Ctrl-C, preemption (SLURM, Kubernetes, docker stop), a closed terminal, SLURM's warning.
  const struct {
    int sig, exit_code;
    const char* reason;
  } kinds[] = {{SIGINT, 130, "interrupted (SIGINT)"},
               {SIGTERM, 143, "terminated (SIGTERM)"},
               {SIGHUP, 129, "hung up (SIGHUP)"},
               {SIGUSR1, 138, "asked to stop (SIGUSR1)"}};
  for (const auto& k : kinds) {
    DYNAMIC_SECTION(k.reason) {
      TempDir dir;
      const pid_t pid = start_paused_fit(dir);
      REQUIRE(kill(pid, k.sig) == 0);
      int status = 0;
      REQUIRE(waitpid(pid, &status, 0) == pid);
      INFO(read_file(dir / "stdout.txt") << read_file(dir / "stderr.txt"));
      CHECK(exit_status(status) == k.exit_code);
      auto s = read_json(dir / "run" / "summary.json");
      CHECK(s["status"] == "cancelled");
      CHECK(s["stop_reason"] == k.reason);
      CHECK(s["optimizer_steps"] == 2);
      CHECK(read_file(dir / "stdout.txt").find(std::string("wick: stopped: ") + k.reason) !=
            std::string::npos);
      auto rec = recorded(dir);
      REQUIRE(!rec.empty());
      CHECK(rec.back() == "after_cancel 0 1");
      CHECK(read_file(dir / "run" / "wick.lock").empty());  // let go on the way out
    }
  }
}

TEST_CASE("a stop signal from two senders (the scheduler and wick launch) is one stop") {
  TempDir dir;
  const pid_t pid = start_paused_fit(dir);
  // Another process signals, as SLURM does every process of a job, and this one, as wick
  // launch forwards what it got. The fit is held stopped meanwhile, so that both arrive before
  // it could end on the first (two signals of one kind could merge while pending).
  REQUIRE(kill(pid, SIGSTOP) == 0);
  const pid_t other = fork();
  REQUIRE(other >= 0);
  if (other == 0) _exit(kill(pid, SIGUSR1) == 0 ? 0 : 1);
  int helper = 0;
  REQUIRE(waitpid(other, &helper, 0) == other);
  REQUIRE(exit_status(helper) == 0);
  REQUIRE(kill(pid, SIGTERM) == 0);
  REQUIRE(kill(pid, SIGCONT) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO(read_file(dir / "stdout.txt") << read_file(dir / "stderr.txt"));
  // Whichever came first stops the fit at the step boundary: after_cancel ran, the summary is
  // written. A second signal taken as "exit now" would leave neither.
  CHECK((exit_status(status) == 143 || exit_status(status) == 138));
  CHECK(read_json(dir / "run" / "summary.json")["status"] == "cancelled");
  auto rec = recorded(dir);
  REQUIRE(!rec.empty());
  CHECK(rec.back() == "after_cancel 0 1");
}

TEST_CASE("one fit per output folder: a second is refused with the holder's pid, exit 2") {
  TempDir dir;
  const pid_t pid = start_paused_fit(dir);
  const auto metrics_before = read_file(dir / "run" / "metrics.jsonl");
  const auto summary_before = read_file(dir / "run" / "summary.json");
  auto second = run_wick({"fit", (dir / "cfg.toml").string()});
  // The first run's files are as it left them.
  CHECK(read_file(dir / "run" / "summary.json") == summary_before);
  CHECK(read_file(dir / "run" / "metrics.jsonl") == metrics_before);
  kill(pid, SIGINT);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO(second.err << second.out);
  CHECK(second.exit_code == 2);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const std::string p = std::to_string(pid);
  CHECK(second.err == "wick: start: output folder '" + (dir / "run").string() +
                          "' is in use by wick pid " + p + " on host " + host +
                          "; wait for it to end, stop it (kill -INT " + p +
                          "), or set trainer.output_dir to another folder\n");
  CHECK(second.out.empty());
  // And it ends as it would alone.
  CHECK(exit_status(status) == 130);
  CHECK(read_json(dir / "run" / "summary.json")["status"] == "cancelled");

  SECTION("a lock held by a fit that has not written its line yet") {
    const int fd = ::open((dir / "run" / "wick.lock").c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
    auto r = run_wick({"fit", (dir / "cfg.toml").string()});
    ::close(fd);
    CHECK(r.exit_code == 2);
    CHECK(r.err == "wick: start: output folder '" + (dir / "run").string() +
                       "' is in use by another wick fit that is starting; wait for it to end or "
                       "set trainer.output_dir to another folder\n");
  }
  SECTION("a lock left by a process that died is taken over with a notice") {
    write_file(dir / "run" / "wick.lock", "pid 999999 host gone\n");
    // Without the thrower, which would pause for a SIGINT (60 s) that this fit never gets.
    auto r = run_wick({"fit", (dir / "cfg.toml").string(), "--set", "trainer.epochs=1", "--set",
                       "hooks.thrower.enabled=false"});
    INFO(r.err << r.out);
    CHECK(r.exit_code == 0);
    CHECK(r.err.find("wick: taking over '" + (dir / "run" / "wick.lock").string() +
                     "' from wick pid 999999 host gone, which ended without releasing it") !=
          std::string::npos);
  }
}

TEST_CASE("a second SIGINT ends `wick fit` at once with exit 130 and summary.json says so") {
  TempDir dir;
  const auto marker = dir / "reached";
  // The thrower never returns from the step: only the second Ctrl-C gets out.
  write_file(dir / "cfg.toml", config(dir,
                                      "point = \"after_step\"\nstep = 0\naction = "
                                      "\"hang\"\nmarker = \"" +
                                          marker.string() + "\"\n"));
  pid_t pid = spawn_wick(dir, {"fit", (dir / "cfg.toml").string()});
  REQUIRE(wait_for(marker));
  // Signals sent close together may merge into one, so keep sending until the process is gone.
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && done == 0; ++i) {
    kill(pid, SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    done = waitpid(pid, &status, WNOHANG);
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL("wick did not end after repeated SIGINTs");
  }
  CHECK(exit_status(status) == 130);
  // It ended at once: no after_cancel, and the summary says how (it said "running", as if the
  // fit still were).
  const std::string what =
      "ended at once by a further SIGINT, before the stop the first signal asked for was done";
  CHECK(read_file(dir / "stderr.txt").find("wick: " + what + "; summary.json says failed") !=
        std::string::npos);
  const auto summary = read_json(dir / "run" / "summary.json");
  CHECK(summary["status"] == "failed");
  CHECK(summary["error"] == what);
  const auto rec = recorded(dir);
  REQUIRE_FALSE(rec.empty());  // the recorder ran, and wrote no after_cancel
  CHECK(count(rec, "after_cancel 0 0") == 0);
}
