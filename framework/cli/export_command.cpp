// `wick export RUN_DIR|CHECKPOINT --out FILE`: a trained TorchScript model (the torchscript
// task's, or any task's whose model is a wick::JitModule) saved with a checkpoint's weights
// (or, for a run without one, the final weights its fit wrote), for torch.jit.load in Python
// and C++. The run's config and --set overrides come from its
// summary.json.
#include <wick/jit.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/run_weights.hpp"
#include "wick/trainer.hpp"

namespace fs = std::filesystem;

namespace wick::cli {

namespace {

struct ExportArgs {
  std::string source, out, weights = "auto";
  std::vector<std::string> plugin_paths;
};

// The run folder of SOURCE: SOURCE itself, or for a checkpoint folder the nearest folder
// above it that has a summary.json.
fs::path run_dir_of(const fs::path& source, bool checkpoint) {
  std::error_code ec;
  if (!checkpoint) return source;
  for (auto p = source.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
    if (fs::exists(p / "summary.json", ec)) return p;
  throw ConfigError("no summary.json in a folder above the checkpoint '" + source.string() +
                    "', so its run's config is unknown; give the run folder");
}

// An --out that would replace what the run keeps: its final weights and records, or anything
// in its checkpoints folder (the checkpoint's files are checked against its manifest).
void refuse_run_files(const fs::path& out, const fs::path& run, const UsedWeights& used) {
  const auto canonical_run = fs::weakly_canonical(run);
  for (const char* kept : {"model.pt", "summary.json", "metrics.jsonl"})
    if (out == canonical_run / kept)
      throw ConfigError("--out " + out.string() + " is the run's own " + kept +
                        "; write the export elsewhere, e.g. --out " +
                        (canonical_run.parent_path() / "exported.pt").string());
  if (!used.checkpoint) return;
  const auto checkpoints = fs::weakly_canonical(used.source).parent_path();
  const auto rel = out.lexically_relative(checkpoints);
  if (!rel.empty() && *rel.begin() != "..")
    throw ConfigError("--out " + out.string() + " is inside the run's checkpoints folder '" +
                      checkpoints.string() +
                      "', whose files wick manages; write the export "
                      "elsewhere, e.g. --out " +
                      (canonical_run.parent_path() / "exported.pt").string());
}

int cmd_export(const ExportArgs& a) {
  return guarded([&] {
    std::error_code ec;
    const fs::path source = fs::absolute(a.source).lexically_normal();
    const bool checkpoint = fs::exists(source / "manifest.json", ec);
    if (!checkpoint && !fs::exists(source / "summary.json", ec))
      throw ConfigError("'" + a.source +
                        "' is neither a run folder (with summary.json) nor a checkpoint folder "
                        "(with manifest.json)");
    const fs::path run = run_dir_of(source, checkpoint);
    nlohmann::json summary;
    try {
      std::ifstream in(run / "summary.json");
      summary = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw ConfigError((run / "summary.json").string() + ": not JSON (" + e.what() + ")");
    }
    if (!summary.contains("config") || !summary["config"].is_string())
      throw ConfigError((run / "summary.json").string() +
                        " names no config (a run of an older wick, or of a host program)");
    auto sets = summary.value("overrides", std::vector<std::string>());
    // The checkpoints are those of the folder given, wherever the config put the run.
    sets.push_back("trainer.output_dir='" + run.string() + "'");
    auto cfg = Config::load(summary["config"].get<std::string>(), sets);
    PluginFinder finder(cfg.search_path(absolute_all(a.plugin_paths)));
    auto trainer = make_trainer(cfg, finder, {}, /*probe_batch_size=*/false);
    auto* jit = dynamic_cast<JitModuleImpl*>(&trainer->model());
    if (!jit)
      throw ConfigError("the model of task '" + cfg.task_plugin() +
                        "' is not a TorchScript module; export works for the torchscript task "
                        "and tasks whose model is a wick::JitModule");
    // The weights validation used (a hook's evaluation weights: EMA's) unless asked otherwise.
    const auto used =
        load_run_weights(cfg, finder, *trainer, checkpoint ? source.string() : "latest",
                         /*evaluation=*/a.weights != "trained", /*option=*/"");
    check_weights_word(used, a.weights);
    // Written beside the target and renamed: a failed export leaves no half file.
    const fs::path out = fs::weakly_canonical(fs::absolute(a.out));
    refuse_run_files(out, run, used);
    const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".tmp");
    try {
      jit->jit().save(tmp.string());
    } catch (const c10::Error& e) {
      fs::remove(tmp, ec);
      throw std::runtime_error("cannot write '" + a.out + "': " + e.what_without_backtrace());
    }
    fs::rename(tmp, out);
    std::printf("wick: exported %s to %s\n", used.describe().c_str(), out.c_str());
    return kOk;
  });
}

}  // namespace

void add_export_command(CLI::App& app, Registry& r) {
  static ExportArgs a;
  auto* c = app.add_subcommand(
      "export",
      "save a trained TorchScript model (the torchscript task's) with a checkpoint's weights, "
      "for torch.jit.load: RUN_DIR takes its latest checkpoint, or without one the final "
      "weights its fit wrote (model.pt)");
  c->add_option("SOURCE", a.source, "a run folder (its latest checkpoint) or a checkpoint folder")
      ->required()
      ->type_name("RUN_DIR|CHECKPOINT");
  c->add_option("--out", a.out, "the TorchScript file to write")->required()->type_name("FILE");
  add_weights_option(c, a.weights);
  c->add_option("--plugin-path", a.plugin_paths,
                "a folder of plugins to search too (one name in two folders is an error)")
      ->type_name("DIR");
  r.push_back({c, [] { return cmd_export(a); }});
}

}  // namespace wick::cli
