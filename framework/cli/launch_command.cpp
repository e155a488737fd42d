// `wick launch` (start data-parallel ranks with torchrun's environment) and the
// `--nproc N` shorthand of fit, evaluate and predict, which re-runs this executable through
// launch.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "commands.hpp"
#include "wick/cluster.hpp"
#include "wick/launch.hpp"

namespace wick::cli {

namespace {

int run_launch(const LaunchOptions& o) {
  try {
    check_launch_options(o);
    return launch(o).exit_code;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "wick launch: %s\n", e.what());
    return kUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wick launch: error: %s\n", e.what());
    return kFailed;
  }
}

// One `wick launch` per node under srun (--ntasks-per-node=1): the nodes are the tasks, this
// node's index is the task's, and the rendezvous is SLURM's, unless the options say otherwise.
void slurm_defaults(const CLI::App& c, LaunchOptions& o) {
  if (std::getenv("WORLD_SIZE")) return;  // already one rank of a torchrun-style job
  const auto job = detect_cluster_env([](const char* n) { return std::getenv(n); });
  if (job.source != "slurm" || job.world <= 1) return;
  if (c.count("--nnodes") == 0) o.nnodes = job.world;
  if (c.count("--node-rank") == 0) o.node_rank = job.rank;
  if (o.nnodes == 1) return;  // one node: its own loopback rendezvous
  if (c.count("--master-addr") == 0) o.master_addr = job.master_addr;
  if (c.count("--master-port") == 0) o.master_port = job.master_port;
}

// This process's own command line without "--nproc N" / "--nproc=N", run under launch.
int relaunch(int nproc) {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t end = all.find('\0', i);
    if (end == std::string::npos) end = all.size();
    args.push_back(all.substr(i, end - i));
    i = end + 1;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0 || args.empty()) {
    std::fprintf(stderr,
                 "wick: cannot find this executable to re-run it; use "
                 "wick launch --nproc N -- wick COMMAND ...\n");
    return kFailed;
  }
  LaunchOptions o;
  o.nproc = nproc;
  o.command.emplace_back(exe, static_cast<std::size_t>(n));
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    o.command.push_back(args[i]);
  }
  return run_launch(o);
}

}  // namespace

void add_launch_command(CLI::App& app, Registry& r) {
  static LaunchOptions o;
  auto* c = app.add_subcommand(
      "launch", "run COMMAND once per data-parallel rank with torchrun's environment variables");
  c->add_option("--nproc", o.nproc, "ranks to start on this node")
      ->check(CLI::Range(1, kMaxLocalRanks));
  c->add_option("--nnodes", o.nnodes,
                "nodes in the job (each runs its own wick launch; under srun: SLURM_NTASKS, "
                "with --node-rank, --master-addr and --master-port from SLURM too)");
  c->add_option("--node-rank", o.node_rank, "this node's index, 0 .. nnodes-1");
  c->add_option("--master-addr", o.master_addr,
                "address of the node with rank 0 (default 127.0.0.1)");
  c->add_option("--master-port", o.master_port,
                "rendezvous port on the master (default: a free one; required with --nnodes > 1)");
  c->add_option("--grace", o.grace_s,
                "seconds between SIGTERM and SIGKILL when ending ranks after a failure, and "
                "the wait (+ 25 s) for the others after a rank stopped on a signal (default 5; "
                "at most 86400)");
  c->add_option("--max-restarts", o.max_restarts,
                "when a rank dies, end every rank and start all again with --resume auto, up "
                "to N times (default 0)");
  c->add_option("COMMAND", o.command, "the program and its arguments, after --")->required();
  r.push_back({c, [c] {
                 try {
                   slurm_defaults(*c, o);
                 } catch (const std::invalid_argument& e) {
                   std::fprintf(stderr, "wick launch: %s\n", e.what());
                   return kUsage;
                 }
                 return run_launch(o);
               }});

  // `wick fit|evaluate|predict CONFIG --nproc N`: the same command, N ranks on this machine.
  static int nproc[3] = {1, 1, 1};
  const char* const names[3] = {"fit", "evaluate", "predict"};
  for (int i = 0; i < 3; ++i) {
    CLI::App* cmd = app.get_subcommand(names[i]);
    cmd->add_option("--nproc", nproc[i], "run data-parallel on N local ranks (via wick launch)")
        ->check(CLI::Range(1, kMaxLocalRanks));
    for (auto& s : r)
      if (s.app == cmd) {
        s.run = [single = s.run, n = &nproc[i]] { return *n > 1 ? relaunch(*n) : single(); };
      }
  }
}

}  // namespace wick::cli
