// libFuzzer target: the config parser and schema checks. An input is TOML text, parsed and
// validated as `wick check` does it (Config::parse, the built-in sections, then the [[hooks]]
// and [task] tables against the plugins in one fixed folder, holding the torch-free test hooks
// "typed" and "choice"). Lines "#set SECTION.KEY=VALUE" at the start of the input are applied
// as --set overrides too; to TOML they are comments, so every corpus file stays a config.
//
// A finding is a crash, a sanitizer report, an exception other than ConfigError (a bad config
// must always be answered with one, placed), or an accepted config whose values break what the
// checks promise (the trainer and the optimizers rely on them without checking again).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "wick/config.hpp"
#include "wick/loader.hpp"

namespace {

constexpr std::size_t kMaxSets = 8;

// The "#set " lines the input starts with, as --set arguments.
std::vector<std::string> leading_sets(const std::string& text) {
  static const std::string kPrefix = "#set ";
  std::vector<std::string> sets;
  std::size_t pos = 0;
  while (sets.size() < kMaxSets && text.compare(pos, kPrefix.size(), kPrefix) == 0) {
    const std::size_t end = text.find('\n', pos);
    const std::size_t from = pos + kPrefix.size();
    sets.push_back(text.substr(from, end == std::string::npos ? end : end - from));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return sets;
}

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_config: %s\n", what.c_str());
  std::abort();
}

void expect(bool ok, const char* what) {
  if (!ok) finding(std::string("accepted config breaks the schema: ") + what);
}

bool positive(double v) {
  return std::isfinite(v) && v > 0;
}

// What validate_builtin promises of a config it accepts.
void check_accepted(const wick::Config& cfg) {
  const auto& t = cfg.trainer();
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  expect(t.epochs >= 0, "trainer.epochs < 0");
  expect(t.batch_size >= 1 && t.batch_size <= kIntMax, "trainer.batch_size out of range");
  expect(t.valid_batch_size >= 0 && t.valid_batch_size <= kIntMax,
         "trainer.valid_batch_size out of range");
  expect(t.max_steps >= 0 && t.log_every >= 0 && t.num_workers >= 0 && t.steps_per_epoch >= 0,
         "a trainer count < 0");
  expect(t.threads >= 0 && t.threads <= 1024, "trainer.threads out of range");
  expect(!t.output_dir.empty(), "trainer.output_dir empty");
  expect(t.device.index <= 127, "trainer.device index > 127");
  expect(!cfg.optimizers().empty(), "no optimizer");
  for (const auto& o : cfg.optimizers()) {
    expect(positive(o.lr), "optimizer lr not finite and > 0");
    expect(positive(o.eps), "optimizer eps not finite and > 0");
    expect(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "optimizer weight_decay < 0");
    expect(o.betas.size() == 2, "optimizer betas not two values");
    for (double b : o.betas) expect(b >= 0 && b < 1, "optimizer beta outside [0, 1)");
    expect(o.momentum >= 0 && o.momentum <= 1 && o.dampening >= 0 && o.dampening <= 1,
           "optimizer momentum or dampening outside [0, 1]");
    for (const auto& g : o.groups) {
      expect(!g.params.empty(), "group with empty params");
      expect(!g.lr || positive(*g.lr), "group lr not finite and > 0");
      expect(!g.weight_decay || (std::isfinite(*g.weight_decay) && *g.weight_decay >= 0),
             "group weight_decay < 0");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Only this folder: a fuzzed [plugins] path must never load a library from elsewhere.
  static const wick::PluginFinder finder({WICK_FUZZ_PLUGIN_DIR});
  try {
    const auto cfg = wick::Config::parse(text, "/fuzz/config.toml", leading_sets(text));
    check_accepted(cfg);
    (void)cfg.search_path();
    for (const auto& h : cfg.make_hooks(finder))
      if (!h.hook || h.instance.empty()) finding("make_hooks returned an empty entry");
    if (cfg.has_task()) cfg.check_task(finder);
  } catch (const wick::ConfigError&) {
    // The answer to a bad config.
  } catch (const std::exception& e) {
    finding(std::string("an exception other than ConfigError: ") + e.what());
  }
  return 0;
}
