// Config validation: every error class is reported as FILE:LINE:COL: message (or with the
// --set argument that caused it), by `wick check` (exit 2) and, for all but the first config
// of a test, by what it runs, in process (wick_check).
#include <tuple>

#include "config/toml_depth.hpp"       // private: the nesting bound
#include "config/trainer_options.hpp"  // private: the [trainer] options' table
#include "support.hpp"
#include "wick/check.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"

using namespace wick::test;

namespace {

// A config that loads the test plugins; user text starts on line 3.
std::string with_plugins(const std::string& text) {
  return test_plugins_toml() + text;
}

// What `wick check` does, in process: whatever it refuses throws.
void check_config(const fs::path& file, const std::vector<std::string>& sets = {}) {
  auto cfg = wick::Config::load(file.string(), sets);
  wick::check_config(cfg, wick::PluginFinder(cfg.search_path()));
}

struct Case {
  TempDir dir;
  fs::path file;
  explicit Case(const std::string& text) : file(dir / "cfg.toml") { write_file(file, text); }

  // The message of `wick check`'s refusal (exit 2, "wick: MESSAGE" on stderr); the command
  // itself runs for the first check of a test, the rest in process (wick_check).
  std::string error(const std::vector<std::string>& sets = {}) const {
    auto r = wick_check(file, sets);
    CHECK(r.exit_code == 2);
    const std::string prefix = "wick: ";
    REQUIRE(r.err.rfind(prefix, 0) == 0);
    REQUIRE(r.err.back() == '\n');
    return r.err.substr(prefix.size(), r.err.size() - prefix.size() - 1);
  }
  std::string at(int line, int col) const {
    return file.string() + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
  }
};

const char* kTyped = "[[hooks]]\nplugin = \"typed\"\ntarget = \"t\"\n";

}  // namespace

TEST_CASE("a good config passes `wick check` with exit 0") {
  Case c(with_plugins("[trainer]\nepochs = 2\n[task]\nplugin = \"synthetic\"\nsamples = 64\n" +
                      std::string(kTyped) + "max_norm = 2\nsizes = [3]\nnames = []\n"));
  REQUIRE_NOTHROW(check_config(c.file));
  auto r = run_wick({"check", c.file.string()});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == c.file.string() + ": ok (task synthetic, 1 hook)\n");
}

TEST_CASE("`wick check` refuses a config without [task] as fit does, check_config takes hooks") {
  Case c(with_plugins("[trainer]\nepochs = 2\n" + std::string(kTyped) + "max_norm = 2\n"));
  // A host program's hooks-only file...
  auto cfg = wick::Config::load(c.file.string(), {});
  CHECK_THAT(wick::check_config(cfg, wick::PluginFinder(cfg.search_path())),
             Catch::Contains(": ok (task (none), 1 hook)"));
  // ...is no config for `wick fit`.
  auto r = run_wick({"check", c.file.string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains(c.file.string() + ": no [task] table; add one naming the "
                                                      "task plugin"));
}

TEST_CASE("a config file that cannot be opened is named with the system's reason") {
  TempDir d;
  const auto missing = (d / "missing.toml").string();
  CHECK_THROWS_WITH(wick::Config::load(missing),
                    missing +
                        ": cannot read the config file: No such file or directory (is the "
                        "path right?)");
  fs::create_symlink(d / "loop.toml", d / "loop.toml");
  CHECK_THROWS_WITH(wick::Config::load((d / "loop.toml").string()),
                    (d / "loop.toml").string() +
                        ": cannot read the config file: Too many levels of symbolic links");
}

TEST_CASE("TOML syntax errors give the place and the parser's message") {
  SECTION("a value missing") {
    Case c("[trainer]\nepochs = 2\nseed = = 3\n");
    CHECK(c.error() == c.at(3, 8) + "TOML syntax error: " +
                           "Error while parsing value: could not determine value type");
  }
  SECTION("a key given twice") {
    Case c("[trainer]\nepochs = 2\nseed = 1\nepochs = 3\n");
    // toml++ places it at the second value.
    CHECK(c.error() == c.at(4, 10) + "TOML syntax error: " +
                           "Error while parsing key-value pair: cannot redefine existing "
                           "integer 'epochs'");
  }
}

TEST_CASE("unknown keys are reported where they are, with a suggestion") {
  SECTION("in [trainer]") {
    Case c("[trainer]\nepochs = 2\nepohcs = 3\n");
    CHECK(c.error() == c.at(3, 1) + "unknown key 'epohcs' in [trainer]; did you mean 'epochs'?");
  }
  SECTION("in a hook's table, checked against the plugin's declared parameters") {
    Case c(with_plugins(std::string(kTyped) + "max_nrom = 2.0\n"));
    CHECK(c.error() ==
          c.at(6, 1) + "unknown key 'max_nrom' in [hooks.typed]; did you mean 'max_norm'?");
  }
  SECTION("in [task], checked against the task plugin") {
    Case c("[task]\nplugin = \"synthetic\"\nsampels = 10\n");
    CHECK(c.error() == c.at(3, 1) + "unknown key 'sampels' in [task]; did you mean 'samples'?");
  }
  SECTION("nothing close: the known keys are listed") {
    Case c("[optimizer]\nxyzzy = 1\n");
    CHECK(c.error() == c.at(2, 1) +
                           "unknown key 'xyzzy' in [optimizer]; known keys: groups name lr "
                           "weight_decay betas eps amsgrad fused momentum dampening nesterov");
  }
  SECTION("in [plugins], whose roles are keys too") {
    Case c("[plugins]\nprofilr = \"my_profiler\"\n");
    CHECK(c.error() == c.at(2, 1) + "unknown key 'profilr' in [plugins]; did you mean 'profiler'?");
  }
  SECTION("a role in [plugins] that names no plugin") {
    Case c("[plugins]\ndata_parallel = 3\n");
    CHECK(c.error() == c.at(2, 17) +
                           "'data_parallel' in [plugins] must be a plugin's name (a string: "
                           "letters, digits and '_', at most 64 characters)");
  }
  SECTION("a misspelt plugin, found by the nearest installed name") {
    Case c("[task]\nplugin = \"synthetic\"\n[[hooks]]\nplugin = \"grad_clp\"\n");
    CHECK_THAT(c.error(), Catch::Contains("no plugin named 'grad_clp'; did you mean "
                                          "'grad_clip'? (looked for wick_grad_clp.so in:"));
  }
  SECTION("a misspelt section") {
    Case c("[trainr]\nepochs = 2\n");
    CHECK(c.error() == c.at(1, 2) + "unknown top-level key 'trainr'; did you mean 'trainer'?");
  }
}

TEST_CASE("wrong types name the key, the type wanted and the value found") {
  SECTION("a string for an integer") {
    Case c("[trainer]\nepochs = \"two\"\n");
    CHECK(c.error() ==
          c.at(2, 10) + "'epochs' in [trainer] must be an integer, not a string ('two')");
  }
  SECTION("an integer for a boolean in a hook") {
    Case c(with_plugins(std::string(kTyped) + "flag = 1\n"));
    CHECK(c.error() == c.at(6, 8) +
                           "'flag' in [hooks.typed] must be a boolean (true or false), "
                           "not an integer (1)");
  }
  SECTION("a wrong array element is placed at the element") {
    Case c(with_plugins(std::string(kTyped) + "sizes = [1, \"x\"]\n"));
    CHECK(c.error() == c.at(6, 13) +
                           "'sizes' in [hooks.typed] must be an array of integers; "
                           "this element is a string");
  }
  SECTION("a string for a hook's order") {
    Case c(with_plugins(std::string(kTyped) + "order = \"first\"\n"));
    CHECK(c.error() == c.at(6, 9) + "'order' in [hooks.typed] must be an integer, not a string");
  }
  SECTION("an array or table found is shown inline, shortened") {
    // Written by wick: toml++ 3.3.0's formatter measures a float below 1 with undefined
    // behaviour (found by fuzz/).
    Case c("[optimizer]\nname = [0.01, -0.5, { a = [] }]\n");
    CHECK(c.error() == c.at(2, 8) +
                           "'name' in [optimizer] must be a string, not an array "
                           "([ 0.01, -0.5, { a = [] } ])");
    Case d("[optimizer]\nname = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]\n");
    CHECK(d.error() == d.at(2, 8) +
                           "'name' in [optimizer] must be a string, not an array "
                           "([ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...)");
  }
  SECTION("a value the type allows but the plugin refuses") {
    Case c(with_plugins(std::string(kTyped) + "max_norm = -1.5\n"));
    CHECK(c.error() == c.at(6, 12) + "'max_norm' in [hooks.typed] (plugin 'typed') must be > 0");
  }
}

TEST_CASE("missing required keys are reported at their table") {
  SECTION("a hook parameter without a default") {
    Case c(with_plugins("[[hooks]]\nplugin = \"typed\"\n"));
    CHECK(c.error() == c.at(3, 1) +
                           "missing required key 'target' in [hooks.typed] (a string: "
                           "a required string)");
  }
  SECTION("the task's plugin") {
    Case c("[trainer]\nepochs = 1\n[task]\nsamples = 3\n");
    CHECK(c.error() == c.at(3, 1) +
                           "missing required key 'plugin' in [task] (the task plugin's "
                           "name, e.g. plugin = \"synthetic\")");
  }
  SECTION("a hook's plugin") {
    Case c("[[hooks]]\nname = \"x\"\n");
    CHECK(c.error() == c.at(1, 1) + "missing required key 'plugin' in [[hooks]]");
  }
}

TEST_CASE("a second instance of a one-instance hook is refused, naming both tables") {
  // grad_accum declares PluginDef::one_instance: two would divide the loss twice.
  Case c(
      "[task]\nplugin = \"synthetic\"\n[[hooks]]\nplugin = \"grad_accum\"\nsteps = 2\n"
      "[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 1.0\n[[hooks]]\nplugin = \"grad_accum\"\n"
      "name = \"again\"\nsteps = 2\n");
  CHECK(c.error() == c.at(9, 1) + "a second [[hooks]] plugin = \"grad_accum\" (the first is at " +
                         c.at(3, 1).substr(0, c.at(3, 1).size() - 2) +
                         "); it takes one instance, since a second would redo its work on "
                         "every step: keep one");
}

TEST_CASE("names a config gives are refused where empty or not plain, before they are used") {
  SECTION("an empty task or hook plugin") {
    Case c("[task]\nplugin = \"\"\n");
    CHECK(c.error() == c.at(2, 10) +
                           "'plugin' in [task] is empty; name the task plugin, e.g. plugin = "
                           "\"synthetic\"");
    Case h("[[hooks]]\nplugin = \"\"\n");
    CHECK(h.error() == h.at(2, 10) + "'plugin' in [[hooks]] is empty; name the plugin");
  }
  SECTION("an instance name that is not a plain word (a metric's NAME.csv, --set hooks.NAME)") {
    for (const std::string name : {"../../x", "a/b", "", "a.b"}) {
      INFO(name);
      Case c("[task]\nplugin = \"synthetic\"\n[[metrics]]\nplugin = \"accuracy\"\nname = \"" +
             name + "\"\n");
      CHECK_THAT(c.error(), Catch::StartsWith(c.at(5, 8) + "'name' in [[metrics]] is '" + name +
                                              "'; an instance name is letters, digits"));
    }
  }
  SECTION("[plugins] roles name a plugin, and are never spliced into TOML") {
    for (const std::string role : {"a\"b", "a-b"}) {
      Case c("[plugins]\nprofiler = '" + role + "'\n");
      CHECK_THAT(c.error(), Catch::StartsWith(c.at(2, 12) + "'profiler' in [plugins] must be"));
    }
  }
  SECTION("a plugin's name is a word, never a path (wick_NAME.so)") {
    Case t("[task]\nplugin = \"a/../x\"\n");
    CHECK(t.error() == t.at(2, 10) +
                           "'plugin' in [task] is 'a/../x'; a plugin's name is letters, digits "
                           "and '_', at most 64 characters");
    Case h("[task]\nplugin = \"synthetic\"\n[[hooks]]\nplugin = \"../progress\"\n");
    CHECK_THAT(h.error(),
               Catch::StartsWith(h.at(4, 10) + "'plugin' in [[hooks]] is '../progress'"));
    // A host program that asks the finder itself gets the same refusal.
    const wick::PluginFinder finder({h.dir.path().string()});
    CHECK_THROWS_WITH(finder.find("a/../x"),
                      "'a/../x' is not a plugin's name (letters, digits and '_', at most 64 "
                      "characters)");
  }
  SECTION("a --set value of more than one TOML value is refused, not cut") {
    Case c("[trainer]\nepochs = 1\n");
    CHECK_THAT(c.error({"trainer.epochs=1\ntrainer.seed=3"}),
               Catch::Contains("holds more than one TOML value"));
  }
  SECTION("a size LibTorch refuses is told in its words, without its C++ backtrace") {
    // Thrown by LibTorch as the command builds the model, and by the task plugin as it starts
    // (wrapped in the plugin's name: in process, as the command's own check runs it).
    Case hidden("[task]\nplugin = \"synthetic\"\nhidden = [9223372036854775807]\n");
    Case features("[task]\nplugin = \"synthetic\"\nfeatures = 9223372036854775807\n");
    for (const auto& r : {run_wick({"check", hidden.file.string()}), wick_check(features.file)}) {
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.err, Catch::Contains("overflow"));
      CHECK_THAT(r.err, !Catch::Contains("frame #"));
    }
  }
  SECTION("a text nested too deep for the parser's recursion is refused, not a crash") {
    std::string deep = "a";
    for (int i = 0; i < 100000; ++i) deep += ".a";
    Case c("[task]\nplugin = \"synthetic\"\n" + deep + " = 1\n");
    // Under [task] (a level), level 1001 is the 1000th dot, at column 2 x 1000.
    CHECK(c.error() == c.at(3, 2000) +
                           "the text nests deeper than 1000 levels (dotted key parts, table "
                           "header parts, inline tables and arrays); write it flatter");
    Case flat("[task]\nplugin = \"synthetic\"\n");
    CHECK_THAT(flat.error({"task.x=" + std::string(2000, '[') + std::string(2000, ']')}),
               Catch::StartsWith("--set task.x=[[[") && Catch::Contains(": the value nests "));
  }
}

TEST_CASE("toml_too_deep counts the levels a TOML text nests, and nothing else") {
  using wick::toml_too_deep;
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  // Each way of nesting, at 1000 levels (read) and past them (refused, at the place).
  CHECK_FALSE(toml_too_deep("a" + repeat(".a", 999) + " = 1\n"));  // 1000 parts, the value's
  CHECK(toml_too_deep("a" + repeat(".a", 1000) + " = 1\n"));
  CHECK_FALSE(toml_too_deep("a = " + repeat("[", 999) + repeat("]", 999)));
  const auto arrays = toml_too_deep("a = " + repeat("[", 1000) + repeat("]", 1000));
  REQUIRE(arrays);
  CHECK(arrays->line == 1);
  CHECK(arrays->column == 4 + 1000);
  CHECK(toml_too_deep("a = " + repeat("{b = ", 1000) + "1" + repeat("}", 1000)));
  CHECK_FALSE(toml_too_deep("a = " + repeat("{b = ", 499) + "1" + repeat("}", 499)));
  // What a scan per line or per key would miss: dotted keys inside inline tables, across
  // lines of an array, and a header's parts beneath its keys.
  const std::string dots = repeat("k.", 300) + "k";
  CHECK(toml_too_deep("a = {" + dots + " = {" + dots + " = {" + dots + " = {" + dots + " = 1}}}}"));
  CHECK(toml_too_deep("a = [\n" + repeat("[\n", 600) + repeat("{x = 1},\n", 3) + "{" + dots +
                      " = {" + dots + " = 1}}"));
  const auto header =
      toml_too_deep("[" + dots + "." + dots + "]\nx = 1\n" + dots + "." + dots + " = 2\n");
  REQUIRE(header);
  CHECK(header->line == 3);
  CHECK(toml_too_deep("[[" + repeat("\"a/b\".", 1000) + "x]]"));  // quoted parts count too
  // Not levels: a float's point, dots in strings and comments, and a new statement each line.
  std::string floats = "w = [";
  for (int i = 0; i < 2000; ++i) floats += "0.5, ";
  CHECK_FALSE(toml_too_deep(floats + "1.5]\n"));
  CHECK_FALSE(toml_too_deep("s = \"" + std::string(3000, '.') + "\"\n# " + std::string(3000, '.') +
                            "\nt = \'\'\'\n" + repeat("[{.\n", 1500) +
                            "\'\'\'\nu = \"\"\"\\\"\"\"" + std::string(3000, '[') + "\"\"\"\n"));
  CHECK_FALSE(toml_too_deep(repeat("a.b.c = 1\n", 2000)));
  CHECK_FALSE(toml_too_deep(repeat("[a.b.c]\nx.y = [[1.5], {z = 2}]\n", 1000)));
}

TEST_CASE("overrides given with --set are typed by the schema") {
  Case c(with_plugins("[trainer]\nepochs = 2\n[task]\nplugin = \"synthetic\"\n" +
                      std::string(kTyped)));

  SECTION("good overrides") {
    auto cfg = wick::Config::load(
        c.file.string(),
        {"trainer.epochs=5", "trainer.output_dir=runs/x y", "trainer.shuffle=false",
         "optimizer.lr=1", "task.samples=40", "hooks.typed.max_norm=3", "hooks.typed.mode=slow"});
    CHECK(cfg.trainer().epochs == 5);
    CHECK(cfg.trainer().output_dir == "runs/x y");  // not a TOML literal: taken as a string
    CHECK(cfg.trainer().shuffle == false);
    CHECK(cfg.optimizer().lr == 1.0);  // an integer where a float is declared
    CHECK(cfg.has_optimizer());
    wick::PluginFinder finder(cfg.search_path());
    CHECK_NOTHROW(cfg.check_task(finder));
    CHECK(cfg.make_hooks(finder).size() == 1);
    auto r = run_wick({"check", c.file.string(), "--set", "hooks.typed.max_norm=3", "--set",
                       "trainer.device=auto"});
    CHECK(r.exit_code == 0);
  }
  SECTION("a value of the wrong type") {
    CHECK(c.error({"trainer.epochs=abc"}) ==
          "--set trainer.epochs=abc: 'epochs' in [trainer] must be an integer, not a string "
          "('abc')");
    CHECK_THAT(c.error({"optimizer.lr=1e309"}),
               Catch::StartsWith("--set optimizer.lr=1e309: '1e309' is not a number TOML can "
                                 "hold ("));
    CHECK(c.error({"hooks.typed.flag=yes"}) ==
          "--set hooks.typed.flag=yes: 'flag' in [hooks.typed] must be a boolean (true or "
          "false), not a string ('yes')");
    // A list's wrong element: at the --set, not at a line of the file.
    CHECK(c.error({"hooks.typed.sizes=[1,\"x\"]"}) ==
          "--set hooks.typed.sizes=[1,\"x\"]: 'sizes' in [hooks.typed] must be an array of "
          "integers; this element is a string");
  }
  SECTION("a value the plugin refuses is placed at the --set") {
    CHECK(
        c.error({"hooks.typed.max_norm=-2"}) ==
        "--set hooks.typed.max_norm=-2: 'max_norm' in [hooks.typed] (plugin 'typed') must be > 0");
  }
  SECTION("a string where a string is declared may need no quotes, but must be valid") {
    CHECK(c.error({"trainer.device=gpu"}) ==
          "--set trainer.device=gpu: 'device' in [trainer] must be \"cpu\", \"cuda\", \"cuda:N\" "
          "(N from 0 to 127) or \"auto\", not \"gpu\"");
  }
  SECTION("unknown keys, sections and instances") {
    CHECK(c.error({"trainer.epohcs=1"}) ==
          "--set trainer.epohcs=1: unknown key 'epohcs' in [trainer]; did you mean 'epochs'?");
    CHECK(c.error({"trainr.epochs=1"}) ==
          "--set trainr.epochs=1: unknown section 'trainr'; did you mean 'trainer'?");
    CHECK(c.error({"hooks.tpyed.flag=true"}) ==
          "--set hooks.tpyed.flag=true: no [[hooks]] "
          "instance named 'tpyed' in " +
              c.file.string() + " (instances: typed)");
    CHECK(c.error({"epochs"}) ==
          "--set epochs: expected SECTION.KEY=VALUE, e.g. --set trainer.epochs=1");
  }
}

TEST_CASE("a choice parameter takes only its declared choices, from the file and from --set") {
  // tests/plugins/choice.cpp: mode, one of "fast", "slow", "exact" (default "fast").
  const std::string hook = "[[hooks]]\nplugin = \"choice\"\nname = \"pick\"\n";
  const std::string task = "[task]\nplugin = \"synthetic\"\n";

  SECTION("a value not among the choices, with a suggestion, placed at the value") {
    Case c(with_plugins(hook + "mode = \"slw\"\n" + task));
    CHECK(c.error() == c.at(6, 8) +
                           "'slw' is not one of \"fast\", \"slow\", \"exact\" for 'mode' in "
                           "[hooks.pick]; did you mean \"slow\"?");
  }
  SECTION("nothing close: no suggestion") {
    Case c(with_plugins(hook + "mode = \"turbo\"\n" + task));
    CHECK(c.error() == c.at(6, 8) +
                           "'turbo' is not one of \"fast\", \"slow\", \"exact\" for 'mode' in "
                           "[hooks.pick]");
  }
  SECTION("a wrong --set is checked the same way") {
    Case c(with_plugins(hook + task));
    CHECK(c.error({"hooks.pick.mode=exat"}) ==
          "--set hooks.pick.mode=exat: 'exat' is not one of \"fast\", \"slow\", \"exact\" for "
          "'mode' in [hooks.pick]; did you mean \"exact\"?");
    CHECK(c.error({"hooks.pick.mode=3"}) ==
          "--set hooks.pick.mode=3: '3' is not one of \"fast\", \"slow\", \"exact\" for 'mode' "
          "in [hooks.pick]");
  }
  SECTION("a value that is not a string") {
    Case c(with_plugins(hook + "mode = 2\n" + task));
    CHECK(c.error() == c.at(6, 8) + "'mode' in [hooks.pick] must be a string, not an integer (2)");
  }
  SECTION("wick fit refuses a wrong value with the same message and exit code 2") {
    TempDir out;
    Case c(with_plugins(hook + "mode = \"Fats\"\n" + task + "[trainer]\noutput_dir = \"" +
                        (out / "run").string() + "\"\n"));
    const std::string msg = c.error();
    CHECK(msg == c.at(6, 8) +
                     "'Fats' is not one of \"fast\", \"slow\", \"exact\" for 'mode' in "
                     "[hooks.pick]; did you mean \"fast\"?");
    auto r = run_wick({"fit", c.file.string()});
    CHECK(r.exit_code == 2);
    CHECK(r.err == "wick: " + msg + "\n");
    CHECK_FALSE(fs::exists(out / "run"));
  }
  SECTION("the choices themselves, the default and quoted or bare --set values pass") {
    Case c(with_plugins(hook + "mode = \"exact\"\n" + task));
    CHECK_NOTHROW(check_config(c.file));
    CHECK_NOTHROW(check_config(c.file, {"hooks.pick.mode=slow"}));
    CHECK_NOTHROW(check_config(c.file, {"hooks.pick.mode=\"fast\""}));
    Case d(with_plugins(hook + task));
    CHECK_NOTHROW(check_config(d.file));
    auto r = run_wick({"check", c.file.string(), "--set", "hooks.pick.mode=slow"});
    INFO(r.err);
    CHECK(r.exit_code == 0);
  }
}

TEST_CASE("built-in choices, the optimizer's name and nan_policy, are checked at load") {
  Case name("[optimizer]\nname = \"adamm\"\n");
  CHECK(name.error() == name.at(2, 8) +
                            "'adamm' is not one of \"adam\", \"adamw\", \"sgd\" for 'name' in "
                            "[optimizer]; did you mean \"adam\"?");
  Case nan("[trainer]\nnan_policy = \"skp\"\n");
  CHECK(nan.error() == nan.at(2, 14) +
                           "'skp' is not one of \"error\", \"skip\", \"ignore\" for "
                           "'nan_policy' in [trainer]; did you mean \"skip\"?");
}

TEST_CASE("the plugins wick fit adds by role are the ones [plugins] names") {
  // --profile adds [plugins] profiler's hook; ranks started without a data-parallel hook get
  // [plugins] data_parallel's. Named plugins that do not exist show that the key was used.
  TempDir d;
  write_file(d / "cfg.toml", "[task]\nplugin = \"synthetic\"\n[trainer]\noutput_dir = \"" +
                                 (d / "run").string() +
                                 "\"\n[plugins]\nprofiler = \"my_profiler\"\n"
                                 "data_parallel = \"my_data_parallel\"\n");
  auto prof = run_wick({"fit", (d / "cfg.toml").string(), "--profile"});
  CHECK(prof.exit_code == 2);
  CHECK(prof.err.find("no plugin named 'my_profiler'") != std::string::npos);
  auto ranks = run_wick({"fit", (d / "cfg.toml").string()},
                        {"WORLD_SIZE=2", "RANK=0", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"});
  CHECK(ranks.exit_code == 2);
  CHECK(ranks.err.find("no plugin named 'my_data_parallel'") != std::string::npos);
}

TEST_CASE("did_you_mean suggests only close keys") {
  const std::vector<std::string> keys = {"epochs", "seed", "batch_size", "max_norm"};
  CHECK(wick::did_you_mean("max_nrom", keys) == "max_norm");
  CHECK(wick::did_you_mean("epohcs", keys) == "epochs");
  CHECK(wick::did_you_mean("batchsize", keys) == "batch_size");
  CHECK(wick::did_you_mean("Seed", keys) == "seed");
  CHECK(wick::did_you_mean("learning_rate", keys).empty());
  CHECK(wick::did_you_mean("x", keys).empty());
}

TEST_CASE("a key far longer than every known one is refused at once, without a suggestion") {
  // did_you_mean built a table of key length by candidate length for every candidate: a 4 MiB
  // key (the largest config read) took 700 MB and 20 s before the error (found by fuzz/).
  const std::string key(std::size_t{1} << 20, 'e');
  CHECK(wick::did_you_mean(key, {"epochs", "seed"}).empty());
  // Three letters more is still within reach of a 9-letter key.
  CHECK(wick::did_you_mean("epochsxxx", {"epochs"}) == "epochs");
  try {
    wick::Config::parse("[trainer]\n" + key + " = 1\n", "long.toml");
    FAIL("no ConfigError");
  } catch (const wick::ConfigError& e) {
    CHECK(std::string(e.what()).find("unknown key 'eee") != std::string::npos);
    CHECK(std::string(e.what()).find("known keys: epochs") != std::string::npos);
  }
}

namespace {

// TrainerOptions' settable fields, compared as one.
auto settable(const wick::TrainerOptions& o) {
  return std::make_tuple(o.epochs, o.seed, o.batch_size, o.max_batch_size, o.valid_batch_size,
                         o.shuffle, o.drop_last, o.max_steps, o.log_every, o.threads,
                         o.auto_threads, o.num_workers, o.steps_per_epoch, o.device.str(),
                         o.auto_device, o.nan_policy, o.output_dir, o.save_model, o.flops,
                         o.peak_gflops, o.auto_batch_size);
}

}  // namespace

TEST_CASE("each [trainer] option's default is TrainerOptions' own, and RunInfo's view agrees") {
  const wick::TrainerOptions d;
  // Not written: every option takes the schema's default.
  CHECK(settable(wick::Config::parse("[trainer]\n", "defaults.toml").trainer()) == settable(d));
  // Written as the schema's default text, one key at a time: the same options.
  const auto schema = wick::trainer_schema();
  REQUIRE(schema.size() == wick::trainer_options().size());
  for (const auto& p : schema) {
    INFO(p.key << " = " << p.default_toml.value_or("(required)"));
    REQUIRE(p.default_toml);
    const auto cfg =
        wick::Config::parse("[trainer]\n" + p.key + " = " + *p.default_toml + "\n", "one_key.toml");
    CHECK(settable(cfg.trainer()) == settable(d));
  }
  // A value that is not the default reaches its field (the table's reader is the key's own).
  CHECK(wick::Config::parse("[trainer]\npeak_gflops = 2.5\n", "f.toml").trainer().peak_gflops ==
        2.5);
  CHECK(wick::Config::parse("[trainer]\nthreads = 3\n", "t.toml").trainer().threads == 3);
  // What plugins see of the options (RunInfo, an SDK struct with defaults of its own) agrees
  // with the trainer's defaults.
  wick::RunInfo view;
  wick::view_options(d, d.device, view);
  const wick::RunInfo r;
  CHECK(std::make_tuple(view.device, view.seed, view.epochs, view.max_steps, view.batch_size,
                        view.valid_batch_size, view.shuffle, view.drop_last, view.nan_policy) ==
        std::make_tuple(r.device, r.seed, r.epochs, r.max_steps, r.batch_size, r.valid_batch_size,
                        r.shuffle, r.drop_last, r.nan_policy));
}
