// The search space and the halving rule of `wick sweep` (wick/sweep.hpp).
#include "wick/sweep.hpp"

#include <toml++/toml.h>

#include <cmath>
#include <cstdint>
#include <sstream>

#include "config/toml_depth.hpp"
#include "wick/files.hpp"  // toml_float
#include "wick/params.hpp"

namespace wick {

namespace {

double number(const std::string& text, const std::string& arg, const char* what) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError("--param " + arg + ": " + what + " '" + text + "' is not a finite number");
}

}  // namespace

SweepParam parse_sweep_param(const std::string& arg) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
    throw ConfigError("--param " + arg +
                      ": expected PATH=SPEC, e.g. --param optimizer.lr=log:1e-4:1e-2 or --param "
                      "trainer.batch_size=[32,64,128]");
  SweepParam p;
  p.path = arg.substr(0, eq);
  p.spec = arg.substr(eq + 1);
  const std::string usage =
      "; a SPEC is [v1, v2, ...], log:LO:HI[:N], uniform:LO:HI[:N] or int:LO:HI";
  if (p.spec.front() == '[') {
    if (toml_too_deep("v = " + p.spec))
      throw ConfigError("--param " + arg + ": the list nests deeper than " +
                        std::to_string(kMaxTomlDepth) + " levels" + usage);
    toml::table t;
    try {
      t = toml::parse("v = " + p.spec);
    } catch (const toml::parse_error& e) {
      throw ConfigError("--param " + arg + ": the list is not valid TOML (" +
                        std::string(e.description()) + ")" + usage);
    }
    if (t.size() != 1)  // "[1, 2]\nx = 3": the rest would be dropped silently
      throw ConfigError("--param " + arg + ": the SPEC holds more than one TOML value" + usage);
    const auto* list = t.get("v")->as_array();
    if (!list || list->empty()) throw ConfigError("--param " + arg + ": the list is empty" + usage);
    for (const auto& v : *list) {
      std::ostringstream o;
      o << toml::toml_formatter{toml::table{{"v", v}}};
      const auto text = o.str();  // "v = LITERAL"
      p.choices.push_back(text.substr(text.find('=') + 2));
    }
    p.kind = SweepParam::Kind::choice;
    return p;
  }
  std::vector<std::string> parts;
  std::stringstream ss(p.spec);
  for (std::string part; std::getline(ss, part, ':');) parts.push_back(part);
  const std::string& kind = parts.front();
  if (kind == "log")
    p.kind = SweepParam::Kind::log;
  else if (kind == "uniform")
    p.kind = SweepParam::Kind::uniform;
  else if (kind == "int")
    p.kind = SweepParam::Kind::integer;
  else
    throw ConfigError("--param " + arg + ": unknown kind '" + kind + "'" + usage);
  if (parts.size() < 3 || parts.size() > 4 ||
      (p.kind == SweepParam::Kind::integer && parts.size() != 3))
    throw ConfigError("--param " + arg + ": expected " + kind +
                      (p.kind == SweepParam::Kind::integer ? ":LO:HI" : ":LO:HI[:N]") + usage);
  p.lo = number(parts[1], arg, "LO");
  p.hi = number(parts[2], arg, "HI");
  if (!(p.lo < p.hi))
    throw ConfigError("--param " + arg + ": LO must be below HI (an invalid range)");
  if (p.kind == SweepParam::Kind::log && p.lo <= 0)
    throw ConfigError("--param " + arg + ": a log range needs LO > 0 (an invalid range)");
  if (p.kind == SweepParam::Kind::integer && (p.lo != std::floor(p.lo) || p.hi != std::floor(p.hi)))
    throw ConfigError("--param " + arg + ": an int range needs whole LO and HI");
  if (parts.size() == 4) {
    const double n = number(parts[3], arg, "N");
    if (n < 2 || n != std::floor(n) || n > 1000)
      throw ConfigError("--param " + arg +
                        ": N, the grid's points, must be a whole number from 2 to 1000");
    p.count = static_cast<std::int64_t>(n);
  }
  return p;
}

std::vector<std::string> grid_values(const SweepParam& p) {
  std::vector<std::string> out;
  switch (p.kind) {
    case SweepParam::Kind::choice:
      return p.choices;
    case SweepParam::Kind::integer: {
      if (p.hi - p.lo >= 1000)
        throw ConfigError("--param " + p.path + "=" + p.spec +
                          ": over 1000 integers to grid; narrow the range or sample with --trials");
      for (auto v = static_cast<std::int64_t>(p.lo); v <= static_cast<std::int64_t>(p.hi); ++v)
        out.push_back(std::to_string(v));
      return out;
    }
    case SweepParam::Kind::log:
    case SweepParam::Kind::uniform:
      if (p.count == 0)
        throw ConfigError("--param " + p.path + "=" + p.spec +
                          ": --grid needs the number of points of a range, e.g. " +
                          (p.kind == SweepParam::Kind::log ? "log" : "uniform") + ":" +
                          toml_float(p.lo, 6) + ":" + toml_float(p.hi, 6) + ":5");
      for (std::int64_t i = 0; i < p.count; ++i) {
        const double t = static_cast<double>(i) / static_cast<double>(p.count - 1);
        out.push_back(toml_float(p.kind == SweepParam::Kind::log ? p.lo * std::pow(p.hi / p.lo, t)
                                                                 : p.lo + (p.hi - p.lo) * t,
                                 6));
      }
      return out;
  }
  return out;
}

std::string sample_value(const SweepParam& p, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  switch (p.kind) {
    case SweepParam::Kind::choice:
      return p.choices[std::uniform_int_distribution<std::size_t>(0, p.choices.size() - 1)(rng)];
    case SweepParam::Kind::integer:
      return std::to_string(std::uniform_int_distribution<std::int64_t>(
          static_cast<std::int64_t>(p.lo), static_cast<std::int64_t>(p.hi))(rng));
    case SweepParam::Kind::log:
      return toml_float(std::exp(std::log(p.lo) + (std::log(p.hi) - std::log(p.lo)) * unit(rng)),
                        6);
    case SweepParam::Kind::uniform:
      return toml_float(p.lo + (p.hi - p.lo) * unit(rng), 6);
  }
  return {};
}

std::vector<std::vector<std::string>> plan_trials(const std::vector<SweepParam>& params, bool grid,
                                                  std::int64_t n, std::uint64_t seed) {
  std::vector<std::vector<std::string>> trials;
  if (!grid) {
    std::mt19937_64 rng(seed);
    for (std::int64_t t = 0; t < n; ++t) {
      std::vector<std::string> values;
      for (const auto& p : params) values.push_back(sample_value(p, rng));
      trials.push_back(std::move(values));
    }
    return trials;
  }
  trials.emplace_back();
  for (const auto& p : params) {
    const auto axis = grid_values(p);
    std::vector<std::vector<std::string>> next;
    for (const auto& t : trials)
      for (const auto& v : axis) {
        next.push_back(t);
        next.back().push_back(v);
      }
    trials = std::move(next);
    if (trials.size() > 10000)
      throw ConfigError("--grid: over 10000 trials; use fewer points or sample with --trials");
  }
  return trials;
}

std::vector<std::int64_t> halving_rungs(std::int64_t min_epochs, std::int64_t eta,
                                        std::int64_t max_epochs) {
  std::vector<std::int64_t> rungs;
  for (std::int64_t r = min_epochs; r < max_epochs; r *= eta) rungs.push_back(r);
  return rungs;
}

bool halving_keeps(double value, const std::vector<double>& at_rung, std::int64_t eta,
                   bool maximize) {
  if (!std::isfinite(value)) return false;
  std::int64_t better = 0;
  for (double v : at_rung)
    if (std::isfinite(v) && (maximize ? v > value : v < value)) ++better;
  const auto n = static_cast<std::int64_t>(at_rung.size());
  return better < (n + eta - 1) / eta;
}

}  // namespace wick
