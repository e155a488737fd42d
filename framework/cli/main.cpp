// The `wick` command: parses the command line and runs one subcommand.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "wick/build_info.hpp"
#include "wick/cluster.hpp"
#include "wick/config.hpp"  // did_you_mean
#include "wick/system.hpp"

#include <sys/stat.h>

namespace {

// A command whose output could not be written (`wick describe > /dev/full`) did not do its job:
// exit 1 with the reason, as coreutils do. A pipe whose reader went away (`wick plugins | head
// -1`) is the reader's choice, not a failure: SIGPIPE, which would have ended wick there, is
// ignored (see run), so that case stays quiet.
int checked_stdout(int code) {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout) && std::cout.good()) return code;
  struct stat st {};
  if (::fstat(1, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return code;
  std::fprintf(stderr, "wick: error: could not write standard output%s%s\n", err ? ": " : "",
               err ? std::strerror(err) : "");
  return code == 0 ? wick::cli::kFailed : code;
}

int run(int argc, char** argv) {
  using namespace wick::cli;
  CLI::App app{
      "wick: a C++ training loop on LibTorch with run-time loaded hook plugins.\n"
      "Exit codes: 0 done, 1 training failed (doctor: something to fix; any command: its\n"
      "standard output could not be written), 2 usage or config error, 128 + the signal when\n"
      "stopped by one (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 138 SIGUSR1)."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("wick ") + WICK_VERSION);

  // Both would end the process without a word, before a stop could save: a file size limit
  // (ulimit -f; ignored, the write fails with EFBIG and is reported as a full disk is) and a
  // pipe whose reader went away (`wick fit | tee log`, where Ctrl-C ends tee too).
  std::signal(SIGXFSZ, SIG_IGN);
  std::signal(SIGPIPE, SIG_IGN);
  wick::keep_freed_memory();  // before any tensor: see wick/system.hpp
  try {
    wick::apply_cpu_disable();    // before any tensor, too: LibTorch picks its kernels once
    wick::hidden_cuda_kernels();  // checked here, not at a run's first step on a GPU
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "wick: error: %s\n", e.what());
    return kUsage;
  }
  Registry commands;
  add_core_commands(app, commands);
  add_doctor_command(app, commands);
  add_new_plugin_command(app, commands);
  add_plot_command(app, commands);
  add_lr_find_command(app, commands);
  add_sweep_command(app, commands);
  add_evaluate_commands(app, commands);
  add_export_command(app, commands);
  add_launch_command(app, commands);

  // CLI11 would say only "A subcommand is required" for a misspelt one.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    std::string list;
    for (const auto* c : app.get_subcommands({})) {
      names.push_back(c->get_name());
      list += (list.empty() ? "" : ", ") + c->get_name();
    }
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const auto near = wick::did_you_mean(argv[1], names);
      std::fprintf(stderr, "wick: error: no command '%s'%s; the commands: %s (wick --help)\n",
                   argv[1], near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str(),
                   list.c_str());
      return kUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  }
  for (auto& c : commands) {
    if (!c.app->parsed()) continue;
    const auto name = c.app->get_name();
    if (name == "fit" || name == "evaluate" || name == "predict") {
      // An srun task: SLURM's variables become torchrun's, which the rest of wick reads.
      try {
        const auto job = wick::adopt_cluster_env();
        if (job.source == "slurm" && job.rank == 0 && job.world > 1)
          std::fprintf(stderr, "wick: SLURM job of %d tasks: rendezvous at %s:%d\n", job.world,
                       job.master_addr.c_str(), job.master_port);
      } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "wick: %s\n", e.what());
        return kUsage;
      }
    }
    return c.run();
  }
  return kUsage;
}

}  // namespace

// Whatever a command wrote is closed when it returns; the static teardown is skipped (about
// 0.1 s of LibTorch's at every exit, see wick/system.hpp).
int main(int argc, char** argv) {
  wick::exit_without_teardown(checked_stdout(run(argc, argv)));
}
