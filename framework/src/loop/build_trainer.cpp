// make_trainer(): a Trainer with the task, optimizers, hooks and metrics of a config.
#include "loop/build_trainer.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "state/snapshot.hpp"
#include "wick/system.hpp"
#include "wick/task.hpp"

namespace wick {

std::unique_ptr<Trainer> build_trainer(const Config& cfg, const PluginFinder& finder, RunInfo run,
                                       TrainerOptions opts, std::vector<std::string>* left_out) {
  // Hooks first: they are cheap to build and their config errors should not wait for data.
  auto hooks = cfg.make_hooks(finder);
  if (left_out) {
    // Which instances handle a stage: a second set connected to a schedule only (connecting
    // may keep state in a hook, so the trainer's own are not used for it).
    auto probe = cfg.make_hooks(finder);
    ScheduleTable table;
    connect_hooks(probe, 0, nullptr, table);
    std::set<std::string> staged;
    for (const auto& chain : table.stages)
      for (const auto& s : chain) staged.insert(s.instance);
    auto end = std::stable_partition(hooks.begin(), hooks.end(), [&](const HookEntry& h) {
      return staged.count(h.instance) > 0;
    });
    for (auto it = end; it != hooks.end(); ++it) left_out->push_back(it->instance);
    hooks.erase(end, hooks.end());
  }
  auto metrics = cfg.make_metrics(finder);
  // The task after seeding, so that random draws in its constructor are reproducible.
  seed_generators(static_cast<std::uint64_t>(opts.seed),
                  resolve_device(opts.device, opts.auto_device).is_cuda());
  auto task = cfg.make_task(finder);
  auto optimizers = cfg.optimizers();
  if (!cfg.has_optimizer()) {
    auto d = task->default_optimizer();
    const auto kind = optimizer_kind(d.name);
    if (!kind)
      throw ConfigError(cfg.path() + ": the task's default_optimizer() names '" + d.name +
                        "', which is not an optimizer wick has (adam, adamw or sgd); set one in "
                        "[optimizer]");
    optimizers.front().kind = *kind;
    optimizers.front().lr = d.lr;
  }
  run.config_path = cfg.path();
  run.config_toml = cfg.toml();
  auto t = std::make_unique<Trainer>(std::move(opts), std::move(task), std::move(optimizers),
                                     std::move(run));
  for (auto& h : hooks) t->add_hook(std::move(h));
  for (auto& m : metrics) t->add_metric(std::move(m));
  return t;
}

std::unique_ptr<Trainer> make_trainer(const Config& cfg, const PluginFinder& finder, RunInfo run,
                                      bool probe_batch_size) {
  auto opts = cfg.trainer();
  if (opts.auto_batch_size) choose_auto_batch_size(cfg, finder, run, opts, probe_batch_size);
  return build_trainer(cfg, finder, std::move(run), std::move(opts));
}

}  // namespace wick
