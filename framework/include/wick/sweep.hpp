// `wick sweep`: the search space of --param arguments, the trials it plans, and the
// successive-halving rule that stops weak trials early. Torch-free; the trials themselves are
// `wick fit` processes (framework/cli/sweep_command.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

struct SweepParam {
  enum class Kind { choice, log, uniform, integer };
  std::string path;  // a config key as --set addresses it: optimizer.lr, hooks.grad_clip.max_norm
  std::string spec;  // as given after '='
  Kind kind = Kind::choice;
  std::vector<std::string> choices;  // TOML literals of a [a, b, ...] list
  double lo = 0, hi = 0;
  std::int64_t count = 0;  // grid points of a range (0: not given)
};

// "PATH=SPEC" where SPEC is a TOML list [v1, v2, ...], log:LO:HI[:N] (log-uniform),
// uniform:LO:HI[:N] or int:LO:HI. Throws ConfigError naming the --param and the fix.
SweepParam parse_sweep_param(const std::string& arg);
// The values of a grid axis as TOML literals; ConfigError for a log or uniform range without
// its count of points.
std::vector<std::string> grid_values(const SweepParam& p);
// One random value as a TOML literal.
std::string sample_value(const SweepParam& p, std::mt19937_64& rng);
// The trials: every combination of the grid (the first --param varies slowest), or `n` random
// draws from `seed`. Each trial is one value per param, in the params' order.
std::vector<std::vector<std::string>> plan_trials(const std::vector<SweepParam>& params, bool grid,
                                                  std::int64_t n, std::uint64_t seed);

// Successive halving, asynchronous (ASHA-style): a trial is judged when it completes a rung's
// epoch, against every value recorded at that rung so far. Rungs: min_epochs * eta^k, below
// max_epochs (the last epoch is no rung: a trial there is done anyway).
std::vector<std::int64_t> halving_rungs(std::int64_t min_epochs, std::int64_t eta,
                                        std::int64_t max_epochs);
// Whether `value` goes on: it is among the best ceil(n / eta) of the n values at its rung (its
// own included). A non-finite value never goes on.
bool halving_keeps(double value, const std::vector<double>& at_rung, std::int64_t eta,
                   bool maximize);

}  // namespace wick

WICK_PUBLIC_END
