// Finding a trained run's checkpoint for evaluate, predict and export.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "commands.hpp"
#include "wick/config.hpp"
#include "wick/trainer.hpp"

namespace fs = std::filesystem;

namespace wick::cli {

namespace {

// The folder the checkpoint hook writes to: hooks.checkpoint.dir, relative to the run folder.
fs::path checkpoints_dir(const Config& cfg, const Trainer& t) {
  const fs::path d = cfg.hook_string("checkpoint", "dir").value_or("checkpoints");
  return d.is_absolute() ? d : fs::path(t.run().output_dir) / d;
}

}  // namespace

CheckpointInfo load_checkpoint(const Config& cfg, Trainer& t, const std::string& what,
                               const std::string& shadow_of) {
  const fs::path dir = checkpoints_dir(cfg, t);
  const bool main = t.run().is_main_process();
  std::error_code ec;
  if (what == "latest") {
    std::vector<fs::path> all;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind("ckpt-", 0) == 0) all.push_back(e.path());
    std::sort(all.rbegin(), all.rend());  // zero-padded names: newest first
    if (all.empty())
      throw ConfigError("--checkpoint latest: no checkpoint in '" + dir.string() +
                        "'; train with [[hooks]] plugin = \"checkpoint\" first, or give "
                        "--checkpoint PATH");
    for (const auto& p : all) {
      try {
        return t.load_weights(p.string(), shadow_of);
      } catch (const CheckpointError& e) {
        if (main) std::fprintf(stderr, "wick: warning: skipping %s\n", e.what());
      }
    }
    throw std::runtime_error("--checkpoint latest: none of the " + std::to_string(all.size()) +
                             " checkpoints in '" + dir.string() + "' is usable (see above)");
  }
  fs::path p = what == "best" ? dir / "best" : fs::path(what);
  if (what != "best" && !fs::exists(p, ec) && fs::exists(dir / p, ec)) p = dir / p;
  if (!fs::is_directory(p, ec))
    throw ConfigError("--checkpoint " + what + ": no checkpoint folder '" + p.string() + "'" +
                      (what == "best"
                           ? "; a fit saves one when hooks.checkpoint.monitor is set (e.g. "
                             "\"valid/loss\"); use --checkpoint latest"
                           : "; give latest, best or the path of a checkpoint folder (as given, "
                             "or inside '" +
                                 dir.string() + "')"));
  return t.load_weights(p.string(), shadow_of);
}

}  // namespace wick::cli
