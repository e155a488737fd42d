// Hardening (issue 13): no config file, value or plugin makes wick hang, crash or accept what
// cannot work. Each case runs `wick check` (or `wick plugins`) and checks the exact message and
// exit code; the config file cases run under a time limit, as a hang is what they guard against.
#include <sys/stat.h>

#include "support.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"

using namespace wick::test;

namespace {

const fs::path kBadRecord = fs::path(WICK_BINARY_DIR) / "tests" / "bad" / "bad_record";

// `wick check ARGS`, killed after 120 s (a hang reads as exit 124; far above the
// slowest check on a loaded machine).
RunResult check_timed(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "120", WICK_BIN, "check"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A config file with `text`, checked as `wick check` checks it (wick_check): exit 2 and one
// line on stderr, which is returned without its "wick: FILE:LINE:COL: " prefix after checking
// that prefix.
struct Checked {
  TempDir dir;
  fs::path file;
  RunResult r;
  Checked(const std::string& text, const std::vector<std::string>& sets = {})
      : file(dir / "cfg.toml") {
    write_file(file, text);
    r = wick_check(file, sets);
  }
  // The message after "wick: FILE:LINE:COL: ", checking the place.
  std::string at(int line, int col) const {
    INFO(r.err << r.out);
    CHECK(r.exit_code == 2);
    const std::string prefix =
        "wick: " + file.string() + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
    REQUIRE(r.err.rfind(prefix, 0) == 0);
    REQUIRE(r.err.back() == '\n');
    return r.err.substr(prefix.size(), r.err.size() - prefix.size() - 1);
  }
};

}  // namespace

TEST_CASE("a config that is not a regular file is refused at once") {
  SECTION("/dev/zero, which never ends") {
    auto r = check_timed({"/dev/zero"});
    CHECK(r.exit_code == 2);
    CHECK(r.err == "wick: /dev/zero: not a regular file; a config must be a TOML file\n");
  }
  SECTION("a FIFO, which would wait for a writer") {
    TempDir dir;
    const fs::path fifo = dir / "cfg.toml";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    auto r = check_timed({fifo.string()});
    CHECK(r.exit_code == 2);
    CHECK(r.err ==
          "wick: " + fifo.string() + ": not a regular file; a config must be a TOML file\n");
  }
  SECTION("a folder") {
    TempDir dir;
    auto r = check_timed({dir.path().string()});
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, ": not a regular file; a config must be a TOML file"));
  }
}

TEST_CASE("a config file over 4 MiB is refused, naming the file and the limit") {
  TempDir dir;
  const fs::path big = dir / "big.toml";
  write_file(big, "# " + std::string((4u << 20) + 10, 'x') + "\n");
  auto r = check_timed({big.string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err == "wick: " + big.string() +
                     ": the config file is larger than 4 MiB, the most wick reads; is it the "
                     "right file?\n");
  // Just under the limit is read: it is refused for what it holds (nothing), not its size.
  write_file(big, "# " + std::string((4u << 20) - 10, 'x') + "\n");
  const auto under = check_timed({big.string()});
  CHECK(under.exit_code == 2);
  CHECK_THAT(under.err, Catch::Contains(big.string() + ": the config is empty"));
}

TEST_CASE("trainer values invalid on their face are refused with their place, exit 2") {
  const std::string head = "[trainer]\n";
  struct Bad {
    std::string line, message;
  };
  const std::vector<Bad> cases = {
      {"threads = 100000",
       "'threads' in [trainer] must be \"auto\" (the default), 0 (LibTorch's default) or at "
       "most 1024; more threads "
       "than cores only slows training, so set at most the number of cores (`wick doctor` shows "
       "it)"},
      {"epochs = -1", "'epochs' in [trainer] must be >= 0 (0: nothing trained)"},
      {"batch_size = 0", "'batch_size' in [trainer] must be between 1 and 2147483647"},
      {"batch_size = -3", "'batch_size' in [trainer] must be between 1 and 2147483647"},
      {"batch_size = 9223372036854775807",
       "'batch_size' in [trainer] must be between 1 and 2147483647"},
      {"valid_batch_size = -1",
       "'valid_batch_size' in [trainer] must be between 0 (same as batch_size) and 2147483647"},
      {"max_steps = -1", "'max_steps' in [trainer] must be >= 0 (0: no limit)"},
      {"log_every = -5", "'log_every' in [trainer] must be >= 0 (0: epoch records only)"},
      {"device = \"gpu\"",
       "'device' in [trainer] must be \"cpu\", \"cuda\", \"cuda:N\" (N from 0 to 127) or "
       "\"auto\", not \"gpu\""},
      {"device = \"cuda:-1\"",
       "'device' in [trainer] must be \"cpu\", \"cuda\", \"cuda:N\" (N from 0 to 127) or "
       "\"auto\", not \"cuda:-1\""},
      {"device = \"cuda:1x\"",
       "'device' in [trainer] must be \"cpu\", \"cuda\", \"cuda:N\" (N from 0 to 127) or "
       "\"auto\", not \"cuda:1x\""},
      {"device = \"cuda:128\"",
       "'device' in [trainer] must be \"cpu\", \"cuda\", \"cuda:N\" (N from 0 to 127) or "
       "\"auto\", not \"cuda:128\""},
      {"device = \"cudaX\"",
       "'device' in [trainer] must be \"cpu\", \"cuda\", \"cuda:N\" (N from 0 to 127) or "
       "\"auto\", not \"cudaX\""},
      {"output_dir = \"\"",
       "'output_dir' in [trainer] must name a run folder, not be empty (e.g. \"runs/my-run\")"},
      {"output_dir = \"/\"",
       "'output_dir' in [trainer] must name a run folder, not the filesystem root (\"/\" "
       "resolves to /)"},
      {"output_dir = \"/tmp/../.\"",
       "'output_dir' in [trainer] must name a run folder, not the filesystem root "
       "(\"/tmp/../.\" resolves to /)"},
  };
  for (const auto& c : cases) {
    Checked k(head + c.line + "\n");
    INFO(c.line);
    const auto eq = c.line.find('=');
    CHECK(k.at(2, static_cast<int>(eq) + 3) == c.message);
  }
  // A relative path that climbs to the root, from wherever wick runs.
  std::string up;
  for (auto p = fs::current_path(); p != p.root_path(); p = p.parent_path()) up += "../";
  Checked k(head + "output_dir = \"" + up + "..\"\n");
  CHECK(has(k.at(2, 14), "must name a run folder, not the filesystem root"));
  // The limits themselves pass.
  Checked ok(head +
             "threads = 1024\nepochs = 1\nbatch_size = 2147483647\nvalid_batch_size = 0\n"
             "device = \"cuda:127\"\noutput_dir = \"runs/x\"\n");
  INFO(ok.r.err);
  CHECK(ok.r.exit_code == 0);
}

TEST_CASE("optimizer values invalid on their face are refused with their place, exit 2") {
  struct Bad {
    std::string name, line, message;
  };
  const std::vector<Bad> cases = {
      {"adam", "lr = inf", "'lr' in [optimizer] must be a finite number, not inf"},
      {"adam", "lr = 1e300",
       "'lr' in [optimizer] is 1e+300, beyond float32's range (3.4e+38), the precision training "
       "computes in; use a smaller value"},
      {"adam", "lr = nan", "'lr' in [optimizer] must be a number, not nan"},
      {"adam", "lr = 0", "'lr' in [optimizer] must be a finite number > 0"},
      {"adam", "lr = -0.1", "'lr' in [optimizer] must be a finite number > 0"},
      {"adam", "betas = [0.9, 1.0]",
       "'betas' in [optimizer] must each be in [0, 1), e.g. [0.9, 0.999]"},
      {"adamw", "betas = [-0.1, 0.9]",
       "'betas' in [optimizer] must each be in [0, 1), e.g. [0.9, 0.999]"},
      {"adam", "eps = 0", "'eps' in [optimizer] must be a finite number > 0"},
      {"adam", "eps = inf", "'eps' in [optimizer] must be a finite number, not inf"},
      {"adam", "eps = 1e-50",
       "'eps' in [optimizer] is 1e-50, which float32 (the precision training computes in) "
       "rounds to 0; use 0 or a value of at least 1e-38"},
      {"adamw", "weight_decay = -0.01",
       "'weight_decay' in [optimizer] must be a finite number >= 0"},
      {"sgd", "weight_decay = nan", "'weight_decay' in [optimizer] must be a number, not nan"},
      {"sgd", "momentum = 1.5", "'momentum' in [optimizer] must be in [0, 1]"},
      {"sgd", "momentum = -0.5", "'momentum' in [optimizer] must be in [0, 1]"},
      {"sgd", "dampening = 2", "'dampening' in [optimizer] must be in [0, 1]"},
      {"sgd", "nesterov = true", "'nesterov' in [optimizer] needs momentum > 0 and dampening = 0"},
      {"sgd", "fused = true", "'fused' in [optimizer] is for name = \"adam\" or \"adamw\""},
  };
  for (const auto& c : cases) {
    Checked k("[optimizer]\nname = \"" + c.name + "\"\n" + c.line + "\n");
    INFO(c.line);
    const auto eq = c.line.find('=');
    CHECK(k.at(3, static_cast<int>(eq) + 3) == c.message);
  }
  Checked ok("[optimizer]\nname = \"sgd\"\nmomentum = 1.0\nnesterov = true\nweight_decay = 0\n");
  INFO(ok.r.err);
  CHECK(ok.r.exit_code == 0);
}

TEST_CASE("values given with --set get the same face checks") {
  Checked k("[trainer]\nepochs = 1\n", {"optimizer.lr=inf"});
  CHECK(k.r.exit_code == 2);
  CHECK(k.r.err ==
        "wick: --set optimizer.lr=inf: 'lr' in [optimizer] must be a finite number, not inf\n");
  Checked n("[trainer]\nepochs = 1\n", {"optimizer.lr=nan"});
  CHECK(n.r.err == "wick: --set optimizer.lr=nan: 'lr' in [optimizer] must be a number, not nan\n");
}

TEST_CASE("a hook order that does not fit an int is refused, not wrapped") {
  Checked k(test_plugins_toml() +
            "[[hooks]]\nplugin = \"typed\"\ntarget = \"t\"\norder = 4294967297\n");
  CHECK(k.at(6, 9) == "'order' in [hooks.typed] must be between -2147483648 and 2147483647");
}

TEST_CASE("a broken plugin info record is refused, naming the plugin and its file") {
  using Kind = wick::PluginError::Kind;
  auto refused = [](const std::string& file) {
    const std::string path = fs::canonical(kBadRecord / file).string();
    try {
      wick::load_plugin_library(path);
    } catch (const wick::PluginError& e) {
      CHECK(static_cast<int>(e.kind) == static_cast<int>(Kind::malformed));
      return std::string(e.what());
    }
    FAIL("no PluginError for " << file);
    return std::string();
  };
  const std::string tail = " (a bug in the plugin, or not built with <wick/plugin.hpp>)";
  auto lead = [](const std::string& name) {
    return "'" + fs::canonical(kBadRecord / ("wick_" + name + ".so")).string() +
           "': malformed plugin record: plugin '" + name + "' ";
  };
  CHECK(refused("wick_bad_default.so") ==
        lead("bad_default") + "parameter 0 ('lr'): its default 'fast' is not a TOML float value" +
            tail);
  CHECK(refused("wick_too_many.so") ==
        lead("too_many") + "declares 4000000000 parameters, more than 1024" + tail);
  CHECK(refused("wick_null_key.so") ==
        lead("null_key") + "parameter 0: its key is a null pointer" + tail);
  CHECK(refused("wick_bad_type.so") ==
        lead("bad_type") + "parameter 0 ('lr'): unknown type 99" + tail);
  CHECK(refused("wick_wild_key.so") ==
        lead("wild_key") +
            "parameter 0: its key does not point to a readable, NUL-terminated string of "
            "sensible length" +
            tail);

  // `wick plugins` lists them as skipped and goes on; nothing crashes.
  auto r = run_wick({"plugins", "--plugin-path", kBadRecord.string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  for (const char* name : {"bad_default", "too_many", "null_key", "bad_type", "wild_key"})
    CHECK(has(r.err, "wick: skipped: " + lead(name)));

  // A config that uses one: the plugin is blamed, at the config's plugin line, exit 2.
  Checked k("[plugins]\npath = \"" + kBadRecord.string() +
            "\"\n[[hooks]]\nplugin = \"bad_default\"\n");
  CHECK(k.at(4, 10) == lead("bad_default") +
                           "parameter 0 ('lr'): its default 'fast' is not a TOML float value" +
                           tail);
}

TEST_CASE("`wick check` runs the task's own checks, as `wick fit` does before training") {
  // synthetic refuses classes < 2 in its constructor (p.error): a type-correct value that only
  // the task knows is wrong.
  Checked k("[task]\nplugin = \"synthetic\"\nsamples = 16\nclasses = 1\n");
  CHECK(k.at(4, 11) == "'classes' in [task] (plugin 'synthetic') must be >= 2");
  // fit refuses it the same way, before any training.
  auto f =
      run_wick({"fit", k.file.string(), "--set", "trainer.output_dir=" + (k.dir / "run").string()});
  CHECK(f.exit_code == 2);
  CHECK(f.err == k.r.err);
  CHECK_FALSE(fs::exists(k.dir / "run" / "summary.json"));

  // The optimizers are built on the task's model: a module it does not have is found too.
  Checked o(
      "[task]\nplugin = \"synthetic\"\nsamples = 16\n[optimizers.nosuch]\nname = "
      "\"adam\"\n");
  CHECK(o.r.exit_code == 2);
  CHECK(has(o.r.err, "wick: " + o.file.string() + ":4:"));
  CHECK(has(o.r.err, "[optimizers.nosuch] names no module of the task's model"));

  Checked ok("[task]\nplugin = \"synthetic\"\nsamples = 16\n");
  CHECK(ok.r.exit_code == 0);
  CHECK(ok.r.out == ok.file.string() + ": ok (task synthetic, 0 hooks)\n");
}

TEST_CASE("nan, inf and values float32 cannot hold are refused by the schema, inf where declared") {
  // A plugin's range check such as `max_norm > 0` (grad_clip's) is false for nan, and so is its
  // negation: nan is refused for every float and float-list parameter before a plugin sees it.
  const std::string hook = test_plugins_toml() + "[[hooks]]\nplugin = \"typed\"\ntarget = \"t\"\n";
  Checked h(hook + "max_norm = nan\n");
  CHECK(h.at(6, 12) == "'max_norm' in [hooks.typed] must be a number, not nan");
  Checked r(hook + "ratios = [0.5, nan]\n");
  CHECK(r.at(6, 16) == "'ratios' in [hooks.typed] must be a number, not nan");
  Checked l("[optimizer]\nname = \"adam\"\nbetas = [0.9, nan]\n");
  CHECK(l.at(3, 15) == "'betas' in [optimizer] must be a number, not nan");
  // What wick check passed and fit refused: a schedule's min_lr or gamma of inf (range checks
  // such as gamma > 0 hold for inf).
  const std::string sched = "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"step\"\n";
  Checked m(sched + "min_lr = inf\n");
  CHECK(m.at(4, 10) == "'min_lr' in [hooks.lr_schedule] must be a finite number, not inf");
  Checked g(sched + "gamma = -inf\n");
  CHECK(g.at(4, 9) == "'gamma' in [hooks.lr_schedule] must be a finite number, not -inf");
  Checked big(hook + "ratios = [0.5, 1e39]\n");
  CHECK(big.at(6, 16) ==
        "'ratios' in [hooks.typed] is 1e+39, beyond float32's range (3.4e+38), the precision "
        "training computes in; use a smaller value");
  // inf where a plugin declares it (param_float_inf): grad_clip's max-abs norm.
  Checked inf(
      "[task]\nplugin = \"synthetic\"\nsamples = 16\n[[hooks]]\nplugin = \"grad_clip\"\n"
      "max_norm = 1.0\nnorm_type = inf\n");
  INFO(inf.r.err);
  CHECK(inf.r.exit_code == 0);
}

TEST_CASE("an empty config file is refused by check as by fit, naming the file") {
  TempDir d;
  write_file(d / "empty.toml", "");
  auto c = run_wick({"check", (d / "empty.toml").string()});
  auto f = run_wick({"fit", (d / "empty.toml").string()});
  INFO(c.err << f.err << c.out << f.out);
  CHECK(c.exit_code == 2);
  CHECK(f.exit_code == 2);
  CHECK_THAT(c.err, Catch::Contains((d / "empty.toml").string() + ": the config is empty"));
  CHECK_THAT(c.err, Catch::Contains("[task]"));
  CHECK_THAT(f.err, Catch::Contains((d / "empty.toml").string() + ": no [task] table"));
}

TEST_CASE("a batch size that leaves an epoch without a batch is refused by check and fit") {
  const std::string text =
      "[trainer]\nbatch_size = 32\ndrop_last = true\n[task]\nplugin = \"synthetic\"\n"
      "samples = 20\n";
  TempDir d;
  write_file(d / "cfg.toml", text);
  auto c = check_timed({(d / "cfg.toml").string()});
  CHECK(c.exit_code == 2);
  CHECK(c.err == "wick: " + (d / "cfg.toml").string() +
                     ": an epoch would have no batch: 20 training samples are fewer than "
                     "trainer.batch_size = 32 with drop_last = true; lower batch_size or set "
                     "drop_last = false\n");
  auto f = run_wick(
      {"fit", (d / "cfg.toml").string(), "--set", "trainer.output_dir=" + (d / "run").string()});
  CHECK(f.exit_code == 2);
  CHECK(f.err == c.err);
  // Without drop_last the one short batch is an epoch.
  auto ok = check_timed({(d / "cfg.toml").string(), "--set", "trainer.drop_last=false"});
  CHECK(ok.exit_code == 0);
}

TEST_CASE("a failed start names the plugin and the step, and leaves no earlier success behind") {
  TempDir d;
  const std::string run = (d / "run").string();
  const std::string base = test_plugins_toml() + "[trainer]\nepochs = 1\noutput_dir = \"" + run +
                           "\"\n[task]\nplugin = \"synthetic\"\nsamples = 32\n";
  write_file(d / "ok.toml", base);
  REQUIRE(run_wick({"fit", (d / "ok.toml").string()}).exit_code == 0);
  REQUIRE(read_json(d / "run" / "summary.json")["status"] == "completed");

  // A hook whose connect() throws: the message says which plugin, which instance, and that it
  // was connect(), at start.
  write_file(d / "evil.toml", base +
                                  "[[hooks]]\nplugin = \"thrower\"\nname = \"evil\"\n"
                                  "action = \"connect\"\n");
  auto r = run_wick({"fit", (d / "evil.toml").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  const std::string said =
      "plugin 'thrower' (instance 'evil') failed in connect(), at start while its hooks were "
      "wired: thrower: connect throws";
  CHECK_THAT(r.err, Catch::Contains(said));
  // The earlier run's "completed" is gone: this run's failure is what the folder says.
  const auto s = read_json(d / "run" / "summary.json");
  CHECK(s["status"] == "failed");
  CHECK_THAT(s["error"].get<std::string>(), Catch::Contains(said));
  CHECK(s["config"] == (d / "evil.toml").string());

  // A task that cannot be made fails before any hook: the same.
  write_file(d / "ok.toml", base);
  REQUIRE(run_wick({"fit", (d / "ok.toml").string()}).exit_code == 0);
  auto bad = run_wick({"fit", (d / "ok.toml").string(), "--set", "task.samples=0"});
  CHECK(bad.exit_code == 2);
  CHECK(read_json(d / "run" / "summary.json")["status"] == "failed");
}

TEST_CASE("metrics_log pointed at a directory is refused at check, naming the key") {
  TempDir d;
  fs::create_directories(d / "logs");
  for (const std::string& file : {(d / "logs").string(), std::string(".")}) {
    INFO(file);
    Checked k(
        "[task]\nplugin = \"synthetic\"\nsamples = 16\n[[hooks]]\nplugin = \"metrics_log\"\n"
        "file = \"" +
        file + "\"\n");
    const auto msg = k.at(6, 8);
    CHECK_THAT(msg, Catch::StartsWith("'file' in [hooks.metrics_log] (plugin 'metrics_log') names "
                                      "a folder ("));
    CHECK_THAT(msg, Catch::EndsWith("), not a file; give a file name"));
  }
}
