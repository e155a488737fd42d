// Starting data-parallel ranks: what `wick launch` does, torch-free so that it can be tested
// with ordinary programs. Each local rank gets torchrun's environment (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT); its output lines are
// prefixed with "[rank R] "; when one rank fails the others get SIGTERM, then SIGKILL after a
// grace period, and the result names the first rank that failed and why. A rank that exits
// 128 + a stop signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1) stopped and did not fail: the others
// are waited for, not ended (when they got the signal too, rank 0 writes the cancel checkpoint).
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>
#include <vector>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

// Bounds check_launch_options keeps: ranks one node runs, and the grace period.
constexpr int kMaxLocalRanks = 1024;
constexpr double kMaxGraceS = 86400;

struct LaunchOptions {
  int nproc = 1;      // ranks on this node
  int nnodes = 1;     // nodes in the job
  int node_rank = 0;  // this node's index (GROUP_RANK)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;   // 0: pick a free port (single node only)
  double grace_s = 5.0;  // SIGTERM -> SIGKILL delay when ending the other ranks
  // After a rank stopped on a signal of its own, how much longer than grace_s the others are
  // waited for (rank 0 writing the cancel checkpoint) before they get that signal too.
  double stop_wait_s = 25.0;
  // When a rank fails: end every rank, then start all again with "--resume auto" (replacing
  // any --resume of the command), up to this many times. Not after a stop signal.
  int max_restarts = 0;
  std::vector<std::string> command;  // program and arguments, run once per local rank
};

struct LaunchResult {
  // 0 when every rank exited 0; else the failed rank's exit code (1 when a signal killed it),
  // or 128 + the stop signal: forwarded, or one a rank stopped on.
  int exit_code = 0;
  int failed_rank = -1;  // global rank that failed first (-1: none)
  std::string reason;    // "exit code 3", "killed by signal 9 (SIGKILL)"
  int master_port = 0;   // the port used (by the last start)
  int restarts = 0;      // how many times every rank was started again
};

// Throws std::invalid_argument on bad options (message names the option and the fix).
void check_launch_options(const LaunchOptions& o);

// A TCP port that was free a moment ago, below the kernel's ephemeral range when it can be
// (where no process's outgoing connection takes it before rank 0 listens on it).
int pick_free_port();

// Runs the ranks and waits for all of them (and restarts them, see max_restarts). Prefixed
// output goes to out / err; the launcher's own messages ("wick launch: ...") go to err.
LaunchResult launch(const LaunchOptions& o, std::FILE* out = stdout, std::FILE* err = stderr);

// The command with "--resume auto" (the newest checkpoint, or a fresh start when there is
// none yet): an existing --resume's value replaced, else appended.
std::vector<std::string> with_resume_auto(const std::vector<std::string>& command);

// A variable set in a child's environment (overwrite = false: only where not set already).
struct ChildEnv {
  std::string name, value;
  bool overwrite = true;
};

// Starts `command` (PATH searched) with stdout and stderr on out_fd and err_fd and `env` set,
// in its own process group (a terminal's Ctrl-C reaches this process alone, which forwards
// it once) and ended with SIGTERM when this process dies, kill -9 included. Returns its pid;
// throws std::runtime_error when it cannot fork. A command that cannot run exits 127.
pid_t start_child(const std::vector<std::string>& command, int out_fd, int err_fd,
                  const std::vector<ChildEnv>& env = {});

// "exit code 3" or "killed by signal 9 (SIGKILL)" for a waitpid status.
std::string describe_wait_status(int status);

}  // namespace wick

WICK_PUBLIC_END
