// The weights a trained run is used with (wick/run_weights.hpp): a checkpoint, or the final
// weights its fit wrote (RUN_DIR/model.pt).
#include "wick/run_weights.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/trainer.hpp"

namespace fs = std::filesystem;

namespace wick {

namespace {

// The folder the checkpoint hook writes to: its `dir`, the config's or else the one the plugin
// declares as its default (read from the plugin, not written again here), relative to the run
// folder. The run folder itself when no checkpoint plugin is found (no run of this config wrote
// a checkpoint then; the messages name the run folder, never the working directory).
fs::path checkpoints_dir(const Config& cfg, const PluginFinder& finder, const Trainer& t) {
  auto dir = cfg.hook_string("checkpoint", "dir");
  if (!dir) {
    try {
      for (const auto& p : finder.find("checkpoint")->info().params)
        if (p.key == "dir" && p.default_toml)
          dir = toml::parse("dir = " + *p.default_toml)["dir"].value<std::string>();
    } catch (const PluginError&) {
    }
  }
  const fs::path d = dir.value_or("");
  return d.is_absolute() ? d : fs::path(t.run().output_dir) / d;
}

// What the run's model.pt holds, from its summary.json ("trained", "ema"; "" when unknown).
std::string final_weights_word(const fs::path& run) {
  try {
    std::ifstream in(run / "summary.json");
    return nlohmann::json::parse(in).value("model_weights", std::string());
  } catch (const std::exception&) {
    return "";
  }
}

UsedWeights from_checkpoint(Trainer& t, const fs::path& p, bool evaluation) {
  UsedWeights u;
  u.checkpoint = t.load_weights(p.string(), evaluation);
  u.source = u.checkpoint->path;
  u.weights = t.weights_loaded().empty() ? "trained" : t.weights_loaded();
  return u;
}

UsedWeights from_final(Trainer& t, const fs::path& file) {
  UsedWeights u;
  t.load_model_file(file.string());
  u.source = file.string();
  u.weights = final_weights_word(file.parent_path());
  if (u.weights.empty()) u.weights = "final";
  return u;
}

}  // namespace

std::string UsedWeights::describe() const {
  if (!checkpoint)
    return "the final weights (" + weights + ") of " + source + ", which the fit wrote at its end";
  return "the " + weights + " weights of " + source + " (epoch " +
         std::to_string(checkpoint->position.epoch) + ", batch " +
         std::to_string(checkpoint->position.batch) + ", optimizer step " +
         std::to_string(checkpoint->optimizer_step) + ")";
}

UsedWeights load_run_weights(const Config& cfg, const PluginFinder& finder, Trainer& t,
                             const std::string& what, bool evaluation, const std::string& option) {
  const fs::path dir = checkpoints_dir(cfg, finder, t);
  const fs::path final_file = fs::path(t.run().output_dir) / "model.pt";
  const bool main = t.run().is_main_process();
  // How the messages name the request, and what else the user can give: the caller's flag, or
  // (no flag) the run folder the caller was given for its latest weights.
  const std::string said = option.empty() ? "'" + t.run().output_dir + "'" : option + " " + what;
  const std::string other = option.empty() ? "a checkpoint folder" : option + " PATH";
  std::error_code ec;
  if (what == "final") {
    if (!fs::exists(final_file, ec))
      throw ConfigError(said + ": no '" + final_file.string() +
                        "'; a fit writes it when it ends (trainer.save_model = true)");
    return from_final(t, final_file);
  }
  if (what == "latest") {
    std::vector<fs::path> all;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind("ckpt-", 0) == 0) all.push_back(e.path());
    std::sort(all.rbegin(), all.rend());  // zero-padded names: newest first
    if (all.empty()) {
      // A run without a checkpoint hook still left its final weights.
      if (fs::exists(final_file, ec)) return from_final(t, final_file);
      throw ConfigError(said + ": no checkpoint in '" + dir.string() + "' and no final weights '" +
                        final_file.string() +
                        "'; train with trainer.save_model = true (the default) or [[hooks]] "
                        "plugin = \"checkpoint\" first, or give " +
                        other);
    }
    for (const auto& p : all) {
      try {
        return from_checkpoint(t, p, evaluation);
      } catch (const CheckpointError& e) {
        if (main) std::fprintf(stderr, "wick: warning: skipping %s\n", e.what());
      }
    }
    throw std::runtime_error(said + ": none of the " + std::to_string(all.size()) +
                             " checkpoints in '" + dir.string() + "' is usable (see above)");
  }
  fs::path p = what == "best" ? dir / "best" : fs::path(what);
  // A weights file by its path (a model.pt, the run's or another's of the same model).
  if (what != "best" && fs::is_regular_file(p, ec)) return from_final(t, p);
  if (what != "best" && !fs::exists(p, ec) && fs::exists(dir / p, ec)) p = dir / p;
  if (!fs::is_directory(p, ec))
    throw ConfigError(said + ": no checkpoint folder '" + p.string() + "'" +
                      (what == "best"
                           ? "; a fit saves one when hooks.checkpoint.monitor is set (e.g. "
                             "\"valid/loss\"); use " +
                                 option + " latest"
                           : "; give latest, best, final, the path of a checkpoint folder (as "
                             "given, or inside '" +
                                 dir.string() + "') or the path of a model.pt"));
  return from_checkpoint(t, p, evaluation);
}

void check_weights_word(const UsedWeights& used, const std::string& word) {
  if (word == "auto" || used.weights == word) return;
  // A checkpoint keeps the trained weights beside a hook's; final weights are one set only.
  if (used.checkpoint && word == "trained") return;
  if (used.checkpoint && used.weights == "trained")
    throw ConfigError("--weights " + word + ": " + used.source +
                      " holds no weights a hook keeps for evaluation (no hook of the run, such "
                      "as [[hooks]] plugin = \"ema\", offered any); use --weights trained");
  if (used.checkpoint && used.weights != word)
    throw ConfigError("--weights " + word + ": " + used.source + " holds the " + used.weights +
                      " weights of a hook, not " + word + "; use --weights " + used.weights +
                      " or --weights auto");
  if (!used.checkpoint && used.weights != word)
    throw ConfigError("--weights " + word + ": the final weights " + used.source + " are the " +
                      used.weights +
                      " ones, and the run has no checkpoint; use --weights auto, or train with "
                      "[[hooks]] plugin = \"checkpoint\" to keep both");
}

}  // namespace wick
