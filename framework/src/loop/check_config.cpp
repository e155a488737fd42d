// `wick check`: a config built as `wick fit` builds it, up to training.
#include "wick/check.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizers.hpp"  // check_trainable
#include "wick/schedule.hpp"
#include "wick/trainer.hpp"

namespace wick {

std::string check_config(const Config& cfg, const PluginFinder& finder) {
  // A config without [task] is checked as the hooks a host program loads; one without
  // anything at all is no config of either kind, and fit refuses it.
  if (cfg.toml().find_first_not_of(" \t\r\n") == std::string::npos)
    throw ConfigError(cfg.path() +
                      ": the config is empty; wick fit needs at least a [task] table naming "
                      "the task plugin, e.g.\n[task]\nplugin = \"synthetic\"");
  // The task's own checks of its parameters and data run in its constructor; the model's
  // module names and parameter groups are checked as its optimizers are made.
  std::size_t num_hooks = 0, num_metrics = 0;
  if (cfg.has_task()) {
    // An "auto" batch size is chosen when the fit starts, not here (check trains nothing).
    auto trainer = make_trainer(cfg, finder, {}, /*probe_batch_size=*/false);
    num_hooks = trainer->hooks().size();
    num_metrics = trainer->metrics().size();
    check_trainable(trainer->model(), cfg.optimizers().empty() ? "" : cfg.optimizers()[0].where);
    trainer->probe_metrics();   // before the hooks are connected: the task's forward alone
    (void)trainer->describe();  // connects the hooks: order and capability checks
  } else {
    auto hooks = cfg.make_hooks(finder);
    ScheduleTable table;
    connect_hooks(hooks, 0, nullptr, table);
    num_hooks = hooks.size();
    num_metrics = cfg.make_metrics(finder).size();
  }
  const std::string metrics =
      num_metrics ? ", " + std::to_string(num_metrics) + " metric" + (num_metrics == 1 ? "" : "s")
                  : "";
  return cfg.path() + ": ok (task " + (cfg.has_task() ? cfg.task_plugin() : "(none)") + ", " +
         std::to_string(num_hooks) + " hook" + (num_hooks == 1 ? "" : "s") + metrics + ")";
}

}  // namespace wick
