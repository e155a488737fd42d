// Subcommands of `wick`: each file under framework/cli/ adds its own with one add_*
// function called from main.cpp. Exit codes: 0 done, 1 failed, 2 usage or config error,
// 128 + the signal when stopped by one (wick/trainer.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace wick::cli {

constexpr int kOk = 0, kFailed = 1, kUsage = 2;

struct Subcommand {
  CLI::App* app;
  std::function<int()> run;
};
using Registry = std::vector<Subcommand>;

// Arguments shared by the subcommands that read a config.
struct ConfigArgs {
  std::string config;
  std::vector<std::string> sets;
  std::vector<std::string> plugin_paths;
};
void add_config_args(CLI::App* cmd, ConfigArgs& a);
// --weights auto|trained|WORD: which of a run's weights (wick/run_weights.hpp,
// check_weights_word), for the subcommands that use a trained run.
void add_weights_option(CLI::App* cmd, std::string& weights);
std::vector<std::string> absolute_all(const std::vector<std::string>& dirs);
// Runs body; an exception is printed (and put in *error, when given) and becomes the exit code
// (2 for a config or plugin error, 1 otherwise).
int guarded(const std::function<int()>& body, std::string* error = nullptr);

void add_core_commands(CLI::App& app, Registry& r);  // fit, describe, check, plugins
void add_doctor_command(CLI::App& app, Registry& r);
void add_new_plugin_command(CLI::App& app, Registry& r);
void add_plot_command(CLI::App& app, Registry& r);       // plot
void add_lr_find_command(CLI::App& app, Registry& r);    // lr-find
void add_sweep_command(CLI::App& app, Registry& r);      // sweep
void add_evaluate_commands(CLI::App& app, Registry& r);  // evaluate, predict
void add_export_command(CLI::App& app, Registry& r);     // export
// One line from RUN_DIR/summary.json (status, epochs, time, samples/s, valid/*); "" if none.
std::string run_summary_line(const std::string& run_dir);
// launch, and --nproc N for fit, evaluate and predict (added last: it wraps them)
void add_launch_command(CLI::App& app, Registry& r);

}  // namespace wick::cli
