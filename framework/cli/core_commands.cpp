#include <c10/util/Exception.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

#include "commands.hpp"
#include "wick/check.hpp"
#include "wick/cluster.hpp"
#include "wick/config.hpp"
#include "wick/context.hpp"
#include "wick/data_parallel.hpp"
#include "wick/loader.hpp"
#include "wick/model_summary.hpp"
#include "wick/outputs.hpp"
#include "wick/schedule.hpp"
#include "wick/trainer.hpp"

namespace fs = std::filesystem;

namespace wick::cli {

void add_config_args(CLI::App* cmd, ConfigArgs& a) {
  cmd->add_option("CONFIG", a.config, "TOML config file")->required();
  cmd->add_option("--set", a.sets, "override a key: SECTION.KEY=VALUE or hooks.NAME.KEY=VALUE")
      ->type_name("K=V");
  cmd->add_option("--plugin-path", a.plugin_paths,
                  "a folder of plugins to search too (one name in two folders is an error)")
      ->type_name("DIR");
}

void add_weights_option(CLI::App* cmd, std::string& weights) {
  cmd->add_option("--weights", weights,
                  "auto (default: the weights validation used: a hook's evaluation weights, the "
                  "ema hook's, when it ran, else the trained ones), trained, or the word of the "
                  "hook's weights (ema, or a plugin's own)")
      ->type_name("auto|trained|WORD");
}

std::vector<std::string> absolute_all(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const auto& d : dirs) out.push_back(fs::absolute(d).lexically_normal().string());
  return out;
}

int guarded(const std::function<int()>& body, std::string* error) {
  auto fail = [&](int rc, const char* prefix, const char* what) {
    std::fprintf(stderr, "wick: %s%s\n", prefix, what);
    if (error) *error = what;
    return rc;
  };
  try {
    return body();
  } catch (const ConfigError& e) {
    return fail(kUsage, "", e.what());
  } catch (const PluginError& e) {
    return fail(kUsage, "", e.what());
  } catch (const c10::Error& e) {
    // LibTorch's message without its C++ backtrace (a value it refused, e.g. a size).
    return fail(kFailed, "error: ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(kFailed, "error: ", e.what());
  } catch (...) {
    return fail(kFailed, "error: ", "an exception that is not a std::exception");
  }
}

namespace {

// The optimizers the stage chains run for (each optimizer_step / zero_grad chain runs once per
// optimizer, in this order), with their parameter groups.
// 1e-4 rather than 0.000100: as the config would write it.
std::string shortest(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void print_optimizers(const wick::Config& cfg) {
  if (!cfg.has_optimizer()) {
    std::printf("\nOptimizer: the task's default\n");
    return;
  }
  std::printf("\n| Optimizer | Over | Kind | lr | Groups |\n| --- | --- | --- | --- | --- |\n");
  for (const auto& o : cfg.optimizers()) {
    std::string groups;
    for (const auto& g : o.groups) {
      groups += (groups.empty() ? "" : "; ") + g.params;
      if (g.lr) groups += " lr " + shortest(*g.lr);
      if (g.weight_decay) groups += " wd " + shortest(*g.weight_decay);
    }
    std::printf("| %s | %s | %s | %g | %s |\n", o.module.empty() ? "optimizer" : o.module.c_str(),
                o.module.empty() ? "the model" : ("module " + o.module).c_str(),
                wick::to_string(o.kind), o.lr, groups.empty() ? "-" : groups.c_str());
  }
}

void print_metrics(const wick::Config& cfg, const wick::PluginFinder& finder) {
  const auto metrics = cfg.make_metrics(finder);
  if (metrics.empty()) return;
  std::printf("\nMetrics (over the whole validation set):\n");
  for (const auto& m : metrics)
    std::printf("  valid/%s: %s (%s)\n", m.instance.c_str(), m.plugin.c_str(),
                finder.find(m.plugin)->info().path.c_str());
}

void print_libraries(const std::vector<wick::HookEntry>& hooks, const std::string& task_lib) {
  std::printf("\nLibraries:\n");
  if (!task_lib.empty()) std::printf("  task: %s\n", task_lib.c_str());
  for (const auto& h : hooks) std::printf("  %s: %s\n", h.instance.c_str(), h.library.c_str());
}

int cmd_describe(const ConfigArgs& a, int ranks) {
  return guarded([&] {
    auto cfg = wick::Config::load(a.config, a.sets);
    wick::PluginFinder finder(cfg.search_path(absolute_all(a.plugin_paths)));
    std::string task_lib;
    if (cfg.has_task()) {
      cfg.check_task(finder);
      task_lib = finder.find(cfg.task_plugin())->info().path;
    }
    auto hooks = cfg.make_hooks(finder);
    wick::ScheduleTable table;
    wick::connect_hooks(hooks, 0, nullptr, table);
    std::fputs(wick::describe_markdown(table).c_str(), stdout);
    if (cfg.has_task()) {
      // Building the model may need the task's data; the schedule stands without it.
      std::printf("\n");
      try {
        std::fputs(wick::task_model_summary(cfg, finder, ranks, hooks).c_str(), stdout);
      } catch (const std::exception& e) {
        std::printf("Model: not built (%s)\n", e.what());
      }
    }
    print_optimizers(cfg);
    print_metrics(cfg, finder);
    print_libraries(hooks, task_lib);
    return kOk;
  });
}

int cmd_check(const ConfigArgs& a) {
  return guarded([&] {
    auto cfg = wick::Config::load(a.config, a.sets);
    wick::PluginFinder finder(cfg.search_path(absolute_all(a.plugin_paths)));
    const auto ok = wick::check_config(cfg, finder);
    // A config for `wick fit` (check_config also takes a host program's hooks-only file):
    // without [task], once the rest is checked, fit's own refusal.
    if (!cfg.has_task()) (void)cfg.task_params(finder);
    std::printf("%s\n", ok.c_str());
    return kOk;
  });
}

int cmd_plugins(const std::vector<std::string>& plugin_paths) {
  return guarded([&] {
    wick::PluginFinder finder(wick::plugin_search_path(absolute_all(plugin_paths)));
    auto scan = finder.scan();
    std::printf("Plugin folders searched:\n");
    for (const auto& d : finder.dirs()) std::printf("  %s\n", d.c_str());
    for (const auto& lib : scan.plugins) {
      const auto& i = lib->info();
      // A plugin of a multi-plugin library says so: that file holds its siblings too.
      const std::string of_library =
          i.in_library ? " (one of " + std::to_string(i.library_size) + " plugins of this library)"
                       : "";
      const char* kind = i.kind == wick::PluginKind::task     ? "task"
                         : i.kind == wick::PluginKind::metric ? "metric"
                                                              : "hook";
      // Only hooks are scheduled: an order means nothing for a task or a metric.
      const std::string order =
          i.kind == wick::PluginKind::hook ? ", order " + std::to_string(i.default_order) : "";
      std::printf("\n%s %s (%s%s%s, SDK %d.%d)\n  %s\n  %s%s\n", i.name.c_str(), i.version.c_str(),
                  kind, i.main_process_only ? ", main process only" : "", order.c_str(),
                  i.api_major, i.api_minor, i.description.c_str(), i.path.c_str(),
                  of_library.c_str());
      // Built before SDK 2.5, a plugin has no record of its LibTorch.
      if (!i.torch_build.empty()) std::printf("  built against %s\n", i.torch_build.c_str());
      int key_width = 18;  // widened to the longest key, so that the columns line up
      for (const auto& p : i.params)
        key_width = std::max(key_width, static_cast<int>(p.key.size()));
      for (const auto& p : i.params) {
        std::printf("    %-*s %-12s %-16s %s\n", key_width, p.key.c_str(),
                    std::string(wick::to_string(p.type)).c_str(),
                    p.default_toml ? p.default_toml->c_str() : "(required)", p.help.c_str());
        if (p.choices.empty()) continue;
        std::string listed;  // under the type column
        for (const auto& c : p.choices) listed += (listed.empty() ? "\"" : ", \"") + c + "\"";
        std::printf("    %-*s one of %s\n", key_width, "", listed.c_str());
      }
    }
    for (const auto& msg : scan.problems) std::fprintf(stderr, "wick: skipped: %s\n", msg.c_str());
    if (scan.plugins.empty()) std::printf("\n(no plugins found)\n");
    return kOk;
  });
}

// A hook the command line adds, with its defaults, made for this run: its parameters see the
// config's trainer.output_dir (where the profiler's file goes).
std::vector<wick::HookEntry> added_hooks(const wick::Config& cfg, const wick::PluginFinder& finder,
                                         const std::string& plugin) {
  const toml::table added{{"trainer", toml::table{{"output_dir", cfg.trainer().output_dir}}},
                          {"hooks", toml::array{toml::table{{"plugin", plugin}}}}};
  std::ostringstream text;
  text << added;
  return wick::Config::parse(text.str(), cfg.path(), {}).make_hooks(finder);
}

// Ranks started for data-parallel training (wick launch, torchrun, --nproc) train together
// even when the config names no data-parallel hook (none that is [plugins] data_parallel's,
// nor any other wick::DataParallelStrategy such as zero3): [plugins] data_parallel's (ddp)
// is added with its defaults, with a notice.
void add_ddp_if_ranks(const wick::Config& cfg, const wick::PluginFinder& finder,
                      wick::Trainer& trainer) {
  const int world = wick::job_ranks().world;
  if (world <= 1) return;
  const std::string& plugin = cfg.data_parallel_plugin();
  for (const auto& h : trainer.hooks())
    if (h.plugin == plugin || dynamic_cast<const wick::DataParallelStrategy*>(h.hook.get())) return;
  for (auto& h : added_hooks(cfg, finder, plugin)) trainer.add_hook(std::move(h));
  if (trainer.run().is_main_process())
    std::fprintf(stderr,
                 "wick: WORLD_SIZE is %d and %s names no %s hook: added [[hooks]] plugin = "
                 "\"%s\" with its defaults\n",
                 world, cfg.path().c_str(), plugin.c_str(), plugin.c_str());
}

// `wick fit --profile`: [plugins] profiler's hook (profiler) with its defaults, unless the
// config has one.
void add_profiler(const wick::Config& cfg, const wick::PluginFinder& finder,
                  wick::Trainer& trainer) {
  const std::string& plugin = cfg.profiler_plugin();
  for (const auto& h : trainer.hooks())
    if (h.plugin == plugin) return;
  for (auto& h : added_hooks(cfg, finder, plugin)) trainer.add_hook(std::move(h));
}

// Prints the model's summary when the fit starts (before_fit: once the run folder is the
// fit's; a fit refused at the start prints nothing), on the main process, first of all hooks.
class ModelSummaryHook : public wick::Hook {
 public:
  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [](wick::Context& c) {
      std::printf("%s\n", wick::model_summary(c.model()).c_str());
      std::fflush(stdout);  // before the fit's own output on stderr
    });
  }
};

void add_model_summary(wick::Trainer& trainer) {
  trainer.add_hook({std::make_shared<ModelSummaryHook>(), "wick fit", "(model summary)",
                    std::numeric_limits<int>::min(), /*main_process_only=*/true, ""});
}

int cmd_fit(const ConfigArgs& a, const std::string& resume, bool profile, bool auto_batch) {
  std::unique_ptr<wick::Trainer> trainer;
  std::string start_error, output_dir, config_path;
  bool main_rank = true;
  int rc = guarded(
      [&] {
        auto sets = a.sets;
        if (auto_batch) sets.push_back("trainer.batch_size=auto");
        auto cfg = wick::Config::load(a.config, sets);
        output_dir = fs::absolute(cfg.trainer().output_dir).lexically_normal().string();
        config_path = cfg.path();
        main_rank = wick::job_ranks().rank == 0;
        wick::PluginFinder finder(cfg.search_path(absolute_all(a.plugin_paths)));
        wick::RunInfo run;
        run.resume = resume;
        // torchrun starts failed workers again with the same arguments: they continue the run.
        const auto job = wick::detect_cluster_env([](const char* n) { return std::getenv(n); });
        if (job.restart_count > 0 && resume != "auto") {
          run.resume = "auto";
          if (job.rank == 0)
            std::fprintf(stderr,
                         "wick: TORCHELASTIC_RESTART_COUNT is %d: resuming with --resume auto\n",
                         job.restart_count);
        }
        trainer = wick::make_trainer(cfg, finder, run);
        add_ddp_if_ranks(cfg, finder, *trainer);
        if (profile) add_profiler(cfg, finder, *trainer);
        add_model_summary(*trainer);
        trainer->connect();
        return kOk;
      },
      &start_error);
  if (rc != kOk) {
    // Whatever refused the start, the run folder must not keep an earlier run's "completed"
    // as if it were this run's.
    if (main_rank && !output_dir.empty()) {
      try {
        wick::write_failed_start_summary(output_dir, start_error, config_path, a.sets);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "wick: warning: could not mark %s/summary.json failed: %s\n",
                     output_dir.c_str(), e.what());
      }
    }
    return rc;
  }
  auto res = trainer->fit();
  if (res.config_error) {
    // Nothing was trained (and the run folder may be another fit's): the error says it all.
    std::fprintf(stderr, "wick: %s\n", res.error.c_str());
    return res.exit_code();
  }
  const auto& st = trainer->state();
  const auto& rec = trainer->context().last_record();
  // The run's summary.json says it best (wall time, samples/s); without outputs, on a rank
  // other than 0 (rank 0 writes the summary), or when this fit could not write it (a full
  // disk: the file is an earlier run's, or says "running"), the state.
  const bool main = trainer->run().is_main_process();
  const std::string line = main ? run_summary_line(trainer->run().output_dir) : std::string();
  const bool ours =
      line.rfind(std::string("wick: ") + wick::to_string(res.status) + ":", 0) == 0 &&
      line.find(", " + std::to_string(st.optimizer_step) + " steps in ") != std::string::npos;
  if (ours && trainer->options().write_outputs) {
    std::printf("%s", line.c_str());
  } else {
    std::printf("wick: %s after %lld epoch(s), %lld optimizer steps, %lld samples",
                wick::to_string(res.status),
                static_cast<long long>(std::min(trainer->context().position().epoch,
                                                trainer->options().epochs)),  // as summary.json
                static_cast<long long>(st.optimizer_step), static_cast<long long>(st.samples_seen));
    for (const auto& [k, v] : rec.values)
      if (k.rfind("valid/", 0) == 0) std::printf(", %s %.4f", k.c_str(), v);
  }
  std::printf("\nwick: run directory %s\n", trainer->run().output_dir.c_str());
  if (!res.model_file.empty())
    std::printf("wick: final weights (%s) in %s\n", res.model_weights.c_str(),
                res.model_file.c_str());
  if (!res.stop_reason.empty()) std::printf("wick: stopped: %s\n", res.stop_reason.c_str());
  if (res.status == wick::FitResult::Status::failed)
    std::fprintf(stderr, "wick: training failed: %s\n", res.error.c_str());
  return res.exit_code();
}

}  // namespace

void add_core_commands(CLI::App& app, Registry& r) {
  static ConfigArgs fit_args, describe_args, check_args;
  static std::string resume;
  static bool profile = false, auto_batch = false;
  static std::vector<std::string> plugin_paths;

  auto* fit = app.add_subcommand("fit", "train the task of CONFIG with its hooks");
  add_config_args(fit, fit_args);
  fit->add_option("--resume", resume,
                  "continue from a checkpoint: latest, best (hooks.checkpoint.monitor's), a "
                  "PATH, or auto (latest if there is one, else start afresh; what restarts use)");
  fit->add_flag("--profile", profile,
                "time every hook, stage handler and step phase (the profiler hook, or the one "
                "[plugins] profiler names): a table at the end, profile.json and summary.json's "
                "\"profile\"");
  fit->add_flag("--auto-batch-size", auto_batch,
                "choose trainer.batch_size before training (as batch_size = \"auto\"): the "
                "power of two up to trainer.max_batch_size with the most samples/s on the CPU, "
                "the largest that fits on CUDA; printed and kept in summary.json");
  r.push_back({fit, [] { return cmd_fit(fit_args, resume, profile, auto_batch); }});

  auto* describe = app.add_subcommand(
      "describe", "print which hook runs at which point and the stage chains (trains nothing)");
  add_config_args(describe, describe_args);
  static int describe_ranks = 2;
  describe
      ->add_option("--ranks", describe_ranks,
                   "ranks for the per-rank memory estimate (parameters, gradients, optimizer "
                   "state; plain ddp and sharded)")
      ->check(CLI::Range(1, 1 << 20))  // a checkpoint's world size is bounded so too
      ->default_val(2);
  r.push_back({describe, [] { return cmd_describe(describe_args, describe_ranks); }});

  auto* check = app.add_subcommand(
      "check",
      "validate CONFIG as fit would before training: plugins and their parameters, the task and "
      "its data, the optimizers, the hook order; writes nothing");
  add_config_args(check, check_args);
  r.push_back({check, [] { return cmd_check(check_args); }});

  auto* plugins = app.add_subcommand("plugins", "list the plugins found, with their parameters");
  plugins
      ->add_option("--plugin-path", plugin_paths,
                   "a folder of plugins to search too (one name in two folders is an error)")
      ->type_name("DIR");
  r.push_back({plugins, [] { return cmd_plugins(plugin_paths); }});
}

}  // namespace wick::cli
