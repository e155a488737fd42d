// Tuning before a fit: the learning-rate finder (`wick lr-find`) and the batch-size finder
// (trainer.batch_size = "auto"). Both train throwaway copies of the config's run: the task
// and optimizers built from the config as `wick fit` builds them, with only the hooks that
// change how a step trains (those with a stage handler: grad_accum, grad_clip,
// mixed_precision, ddp); nothing is written to the run folder by the training itself, and no
// weights, optimizer state or checkpoint of a later fit come from it. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

class Config;
class PluginFinder;

struct LrFindOptions {
  double start = 1e-7;  // learning rate of the first batch
  double end = 10;      // ... of the last
  std::int64_t steps = 100;
  double smoothing = 0.98;  // exponential moving average of the loss, bias-corrected
  double diverge = 4;       // stop once the smoothed loss exceeds this many times its minimum
};

struct LrFindPoint {
  std::int64_t step = 0;  // training batch, from 0
  double lr = 0, loss = 0, smoothed = 0;
};

struct LrFindResult {
  std::vector<LrFindPoint> points;
  bool diverged = false;  // stopped early: the smoothed loss blew up (or was not finite)
  double suggestion = 0;  // 0: no descent found
  std::int64_t suggestion_step = -1;
  double min_loss = 0, min_loss_lr = 0;  // the lowest smoothed loss, and where
  std::vector<std::string> left_out;     // hook instances that do not change a step
};

// The learning rate of batch i: start * (end / start)^(i / (steps - 1)).
double lr_ramp(const LrFindOptions& o, std::int64_t i);
// The index of the steepest descent of the smoothed loss against log(lr) (central differences),
// among the points after the first tenth and before the minimum; -1 when there is none.
std::int64_t steepest_descent(const std::vector<LrFindPoint>& points);
// Throws ConfigError naming the option for start <= 0, end <= start, steps < 10, a smoothing
// outside [0, 1) or a divergence factor <= 1.
void check_lr_find_options(const LrFindOptions& o);

// An exponential ramp of the learning rate (every parameter group of every optimizer keeps
// its ratio to the optimizer's first group), one value per training batch, stopped once the
// smoothed loss diverges. Throws ConfigError or std::runtime_error when the run cannot train.
LrFindResult find_lr(const Config& cfg, const PluginFinder& finder, const LrFindOptions& o);

struct BatchSizeProbe {
  std::int64_t batch_size = 0;
  double samples_per_s = 0;  // 0 where it did not fit or had too few batches
  std::string note;          // "out of memory", "too few batches", ""
};

struct BatchSizeChoice {
  std::int64_t batch_size = 0;
  std::string method;  // "throughput" (CPU) or "memory" (CUDA)
  std::vector<BatchSizeProbe> probes;
  std::string json() const;  // what summary.json keeps as "batch_size_search"
  std::string line() const;  // one line for the console
};

// CPU: the power of two up to trainer.max_batch_size with the best samples/s over a short
// probe (a few batches each, timed after two). CUDA: the largest power of two up to the bound
// whose steps fit in memory (out-of-memory caught, the probe's memory released, tried at half
// the size). Throws ConfigError with WORLD_SIZE > 1: ranks probing apart could choose apart.
BatchSizeChoice find_batch_size(const Config& cfg, const PluginFinder& finder);

}  // namespace wick

WICK_PUBLIC_END
