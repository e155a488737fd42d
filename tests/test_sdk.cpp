// The plugin guide's promises: its minimal example is the tested file and works, the
// version rule admits older minors and refuses other majors with its message, and
// Params::get_path resolves against the config file.
#include <wick/version.hpp>

#include <algorithm>
#include <map>
#include <tuple>

#include "support.hpp"

using namespace wick::test;

namespace {

std::string version(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string sdk_plugins_toml() {
  return std::string("[plugins]\npath = \"") + WICK_SDK_TEST_PLUGIN_DIR + "\"\n";
}

std::string synthetic_toml(const TempDir& dir, int epochs) {
  return "[trainer]\nepochs = " + std::to_string(epochs) + "\nbatch_size = 32\n" +
         "output_dir = \"" + (dir / "run").string() + "\"\n" +
         "[task]\nplugin = \"synthetic\"\nsamples = 256\nvalid_samples = 64\n" + sdk_plugins_toml();
}

}  // namespace

TEST_CASE("sdk/README.md shows sdk/examples/minimal_hook.cpp verbatim") {
  const auto readme = read_file(fs::path(WICK_SOURCE_DIR) / "sdk" / "README.md");
  const auto source =
      read_file(fs::path(WICK_SOURCE_DIR) / "sdk" / "examples" / "minimal_hook.cpp");
  const std::string marker = "<!-- sdk/examples/minimal_hook.cpp -->\n```cpp\n";
  auto start = readme.find(marker);
  REQUIRE(start != std::string::npos);
  start += marker.size();
  auto end = readme.find("```\n", start);
  REQUIRE(end != std::string::npos);
  CHECK(readme.substr(start, end - start) == source);
}

TEST_CASE("the minimal example stops the fit at its target and checks its parameter") {
  TempDir dir;
  write_file(dir / "cfg.toml",
             synthetic_toml(dir, 4) + "[[hooks]]\nplugin = \"minimal_hook\"\ntarget = 0.01\n");
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["epochs"] == 1);  // any accuracy is >= 0.01: stopped after the first epoch
  CHECK(s["stop_reason"] == "valid/accuracy reached the target");

  // Out of range: the plugin's own check, placed at the key by Params::error.
  r = run_wick({"check", (dir / "cfg.toml").string(), "--set", "hooks.minimal_hook.target=2"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("'target' in [hooks.minimal_hook] (plugin 'minimal_hook') "
                                    "must be in (0, 1]"));
  // A typo: the SDK's check, with a suggestion.
  const auto typo = synthetic_toml(dir, 1) + "[[hooks]]\nplugin = \"minimal_hook\"\ntarjet = 0.5\n";
  write_file(dir / "typo.toml", typo);
  const auto line = std::count(typo.begin(), typo.end(), '\n');  // the last line
  r = run_wick({"check", (dir / "typo.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains((dir / "typo.toml").string() + ":" + std::to_string(line) +
                                    ":1: unknown key 'tarjet' in [hooks.minimal_hook]; did you "
                                    "mean 'target'?"));
}

TEST_CASE("version rule: same major and an older or equal minor load, others are refused") {
  const int M = WICK_API_MAJOR, m = WICK_API_MINOR;
  const int older = m > 0 ? m - 1 : 0;  // at minor 0 the oldest minor is the host's own
  auto r = run_wick({"plugins", "--plugin-path", WICK_SDK_TEST_PLUGIN_DIR});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("v_older_minor 1.0.0 (hook, order 0, SDK " + version(M, older)));
  CHECK_THAT(r.out, Catch::Contains("v_same_minor 1.0.0 (hook, order 0, SDK " + version(M, m)));
  const std::string supports = ", this wick supports " + version(M, 0) + " to " + version(M, m) +
                               " (same major, minor not newer); ";
  const std::string rebuild =
      "rebuild the plugin against this wick's SDK (find_package(wick) "
      "and wick_add_plugin)";
  const std::string upgrade =
      "the plugin needs a newer wick: upgrade wick, or rebuild the "
      "plugin against this wick's SDK";
  for (auto [name, got, fix] : {std::tuple{"v_newer_minor", version(M, m + 1), upgrade},
                                std::tuple{"v_next_major", version(M + 1, m), upgrade},
                                std::tuple{"v_prev_major", version(M - 1, m), rebuild}}) {
    CHECK_THAT(r.out, !Catch::Contains(std::string(name) + " 1.0.0"));
    CHECK_THAT(r.err, Catch::Contains(std::string("wrong SDK API version on plugin '") + name +
                                      "' (" + WICK_SDK_TEST_PLUGIN_DIR + "/wick_" + name +
                                      ".so): got version " + got + supports + fix));
  }

  // The older-minor plugin is built, connected and run; a different major stops a run.
  TempDir dir;
  write_file(dir / "old.toml", synthetic_toml(dir, 1) + "[[hooks]]\nplugin = \"v_older_minor\"\n");
  r = run_wick({"fit", (dir / "old.toml").string()});
  REQUIRE(r.exit_code == 0);
  int seen = 0;  // logged at before_epoch: in the first record written after it
  for (const auto& l : read_jsonl(dir / "run" / "metrics.jsonl"))
    if (l.contains("v_older_minor/ran") && l["v_older_minor/ran"] == 1.0) ++seen;
  CHECK(seen == 1);

  write_file(dir / "major.toml", synthetic_toml(dir, 1) + "[[hooks]]\nplugin = \"v_next_major\"\n");
  r = run_wick({"check", (dir / "major.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("wrong SDK API version on plugin 'v_next_major'"));
}

TEST_CASE("Params::get_path takes a relative value relative to the config file's folder") {
  TempDir dir;
  fs::create_directories(dir / "conf" / "out");
  write_file(dir / "conf" / "cfg.toml", synthetic_toml(dir, 1) +
                                            "[[hooks]]\nplugin = \"path_probe\"\n"
                                            "file = \"out/../out/probe.txt\"\n");
  // Run from another folder, so that a cwd-relative reading would write elsewhere.
  auto r = run_wick({"fit", (dir / "conf" / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  const auto expected = (dir / "conf" / "out" / "probe.txt").string();
  REQUIRE(fs::exists(expected));
  CHECK(read_file(expected) == expected);  // absolute and normalised

  // An absolute value is kept as it is.
  const auto abs = (dir / "abs.txt").string();
  r = run_wick({"fit", (dir / "conf" / "cfg.toml").string(), "--set",
                "hooks.path_probe.file=\"" + abs + "\""});
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(abs) == abs);
}

TEST_CASE("param_choice: wick plugins lists the choices, and the plugin reads the one chosen") {
  // tests/plugins/choice.cpp: mode, one of "fast", "slow", "exact" (default "fast"); it logs
  // "choice/<mode>" = the index it found the value at.
  auto r = run_wick({"plugins", "--plugin-path", WICK_TEST_PLUGIN_DIR});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("\n    mode               choice       \"fast\"           how to "
                             "run\n                       one of \"fast\", \"slow\", "
                             "\"exact\"\n    scale              float        1.0              "
                             "a float beside it\n"));

  TempDir dir;
  const std::string hook = "[[hooks]]\nplugin = \"choice\"\n";
  write_file(dir / "default.toml", synthetic_toml(dir, 1) + hook);
  write_file(dir / "exact.toml", synthetic_toml(dir, 1) + hook + "mode = \"exact\"\n");
  int runs = 0;
  auto read_back = [&](const std::string& config, const std::vector<std::string>& sets) {
    const auto out = dir / ("run" + std::to_string(++runs));
    std::vector<std::string> args = {"fit",           (dir / config).string(),
                                     "--plugin-path", WICK_TEST_PLUGIN_DIR,
                                     "--set",         "trainer.output_dir=" + out.string()};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    auto f = run_wick(args);
    INFO(f.err << f.out);
    REQUIRE(f.exit_code == 0);
    std::map<std::string, double> seen;
    for (const auto& l : read_jsonl(out / "metrics.jsonl"))
      for (const auto& [k, v] : l.items())
        if (k.rfind("choice/", 0) == 0) seen[k] = v.get<double>();
    return seen;
  };
  using Seen = std::map<std::string, double>;
  CHECK(read_back("default.toml", {}) == Seen{{"choice/fast", 0.0}});
  CHECK(read_back("exact.toml", {}) == Seen{{"choice/exact", 2.0}});
  CHECK(read_back("exact.toml", {"hooks.choice.mode=slow"}) == Seen{{"choice/slow", 1.0}});
}

TEST_CASE("wick new-plugin checks the name and the folder, and writes the renamed example") {
  TempDir dir;
  auto r = run_wick({"new-plugin", "2fast", "--dir", (dir / "a").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("invalid plugin name '2fast': use letters, digits and '_'"));
  r = run_wick({"new-plugin", "my-hook", "--dir", (dir / "a").string()});
  CHECK(r.exit_code == 2);
  r = run_wick({"new-plugin", "synthetic", "--dir", (dir / "a").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("a plugin named 'synthetic' already exists"));
  CHECK_FALSE(fs::exists(dir / "a"));

  r = run_wick({"new-plugin", "stop_early", "--dir", (dir / "a").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto expected = read_file(fs::path(WICK_SOURCE_DIR) / "sdk" / "examples" / "minimal_hook.cpp");
  for (auto [from, to] : {std::pair{std::string("minimal_hook"), std::string("stop_early")},
                          std::pair{std::string("MinimalHook"), std::string("StopEarly")}})
    for (auto pos = expected.find(from); pos != std::string::npos; pos = expected.find(from, pos))
      expected.replace(pos, from.size(), to);
  CHECK(read_file(dir / "a" / "stop_early.cpp") == expected);
  CHECK_THAT(read_file(dir / "a" / "CMakeLists.txt"),
             Catch::Contains("wick_add_plugin(stop_early SOURCES stop_early.cpp)"));
  CHECK_THAT(read_file(dir / "a" / "stop_early.toml"), Catch::Contains("plugin = \"stop_early\""));
  CHECK(fs::exists(dir / "a" / "README.md"));

  // A folder with a space and a quote: the commands it prints paste into a shell as they are.
  const auto spaced = dir / "my hook's";
  r = run_wick({"new-plugin", "spaced", "--dir", spaced.string()});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("  cd '" + (dir / "my hook'\\''s").string() + "'\n"));

  write_file(dir / "b" / "keep.txt", "mine");  // an existing folder is never written into
  r = run_wick({"new-plugin", "other", "--dir", (dir / "b").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("refusing to overwrite"));
  CHECK_FALSE(fs::exists(dir / "b" / "other.cpp"));
}

TEST_CASE("the minimal task template trains: model, TensorDataset, forward and loss") {
  TempDir dir;
  write_file(dir / "cfg.toml", "[trainer]\nepochs = 8\nbatch_size = 32\noutput_dir = \"" +
                                   (dir / "run").string() +
                                   "\"\n[task]\nplugin = \"minimal_task\"\n" + sdk_plugins_toml());
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["valid/loss"].get<double>() < 0.1);  // y = 3x - 1 with noise 0.1: learnt
  CHECK(s.contains("valid/abs_error"));
}

TEST_CASE("the minimal metric template: balanced accuracy over the whole validation set") {
  TempDir dir;
  write_file(dir / "cfg.toml",
             "[trainer]\nepochs = 1\nbatch_size = 32\noutput_dir = \"" + (dir / "run").string() +
                 "\"\n[task]\nplugin = \"synthetic\"\nsamples = 64\n" +
                 "valid_samples = 80\nclasses = 2\n[optimizer]\nname = \"sgd\"\n" +
                 "lr = 1e-30\n[[metrics]]\nplugin = \"minimal_metric\"\n" +
                 "[[metrics]]\nplugin = \"recall\"\n" + sdk_plugins_toml());
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  // Balanced accuracy is the built-in recall's macro average when every class has samples.
  CHECK(s["valid/minimal_metric"].get<double>() ==
        Approx(s["valid/recall"].get<double>()).epsilon(1e-12));
}

TEST_CASE("wick new-plugin --kind task and --kind metric write the renamed templates") {
  TempDir dir;
  auto r = run_wick({"new-plugin", "my_task", "--kind", "task", "--dir", (dir / "t").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto expected = read_file(fs::path(WICK_SOURCE_DIR) / "sdk" / "examples" / "minimal_task.cpp");
  for (auto [from, to] : {std::pair{std::string("minimal_task"), std::string("my_task")},
                          std::pair{std::string("MinimalTask"), std::string("MyTask")}})
    for (auto pos = expected.find(from); pos != std::string::npos; pos = expected.find(from, pos))
      expected.replace(pos, from.size(), to);
  CHECK(read_file(dir / "t" / "my_task.cpp") == expected);
  CHECK_THAT(read_file(dir / "t" / "CMakeLists.txt"),
             Catch::Contains("wick_add_plugin(my_task SOURCES my_task.cpp)"));
  const auto toml = read_file(dir / "t" / "my_task.toml");
  CHECK_THAT(toml, Catch::Contains("[task]\nplugin = \"my_task\"\n"));
  CHECK_THAT(read_file(dir / "t" / "README.md"), Catch::Contains("A wick task plugin"));

  r = run_wick({"new-plugin", "my_metric", "--kind", "metric", "--dir", (dir / "m").string()});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(read_file(dir / "m" / "my_metric.cpp"),
             Catch::Contains("class MyMetric : public wick::Metric"));
  CHECK_THAT(read_file(dir / "m" / "my_metric.toml"),
             Catch::Contains("[[metrics]]\nplugin = \"my_metric\"\n"));
  CHECK_THAT(read_file(dir / "m" / "README.md"), Catch::Contains("A wick metric plugin"));
  r = run_wick({"new-plugin", "x", "--kind", "loss", "--dir", (dir / "x").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("unknown plugin kind 'loss': use hook, task or metric"));
  // A name taken by a plugin of a multi-plugin library is taken as well.
  r = run_wick({"new-plugin", "parts_probe", "--dir", (dir / "p").string()},
               {"WICK_PLUGIN_PATH=" + (fs::path(WICK_BINARY_DIR) / "tests" / "parts").string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("a plugin named 'parts_probe' already exists"));
}
