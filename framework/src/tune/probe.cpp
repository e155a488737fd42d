// Throwaway fits for the learning-rate and batch-size finders.
#include "tune/probe.hpp"

#include <limits>

#include "loop/build_trainer.hpp"

namespace wick {

ProbeRun run_probe(const Config& cfg, const PluginFinder& finder, TrainerOptions opts,
                   std::shared_ptr<Hook> driver, const std::string& name) {
  opts.write_outputs = false;
  opts.flops = false;
  opts.log_every = 0;
  opts.max_steps = 0;
  opts.epochs = std::numeric_limits<int>::max();
  opts.auto_batch_size = false;
  ProbeRun out;
  auto trainer = build_trainer(cfg, finder, RunInfo{}, std::move(opts), &out.left_out);
  trainer->add_hook({std::move(driver), name, "(" + name + ")", std::numeric_limits<int>::min(),
                     /*main_process_only=*/false, ""});
  out.result = trainer->fit();
  if (out.result.config_error) throw ConfigError(out.result.error);
  return out;
}

}  // namespace wick
