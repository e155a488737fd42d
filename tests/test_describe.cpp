// `wick describe` on a config with three hooks prints exactly this schedule (golden output); a
// misspelt command is named.
#include "support.hpp"

using namespace wick::test;

TEST_CASE("wick describe prints the schedule table exactly") {
  TempDir dir;
  const std::string trace = (dir / "trace.txt").string();
  write_file(dir / "cfg.toml",
             test_plugins_toml() +
                 "[[hooks]]\nplugin = \"thrower\"\nname = \"early_stop\"\npoint = \"after_epoch\"\n"
                 "action = \"stop\"\norder = -3\n\n"
                 "[[hooks]]\nplugin = \"recorder\"\nname = \"trace\"\npath = \"" +
                 trace +
                 "\"\n"
                 "points = [\"after_fit\", \"before_fit\", \"before_step\", \"after_step\"]\n"
                 "stages = [\"backward\", \"optimizer_step\"]\n\n"
                 "[[hooks]]\nplugin = \"recorder\"\nname = \"audit\"\norder = 5\npath = \"" +
                 trace +
                 "\"\npoints = [\"after_step\", \"after_cancel\"]\n"
                 "stages = [\"optimizer_step\", \"zero_grad\"]\n");
  auto r = run_wick({"describe", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());

  const std::string table =
      "| Lifecycle Point | Hook       | Order |\n"
      "| --------------- | ---------- | ----- |\n"
      "| before_fit      | trace      |     0 |\n"
      "| before_epoch    | (none)     |       |\n"
      "| before_step     | trace      |     0 |\n"
      "| after_pred      | (none)     |       |\n"
      "| after_loss      | (none)     |       |\n"
      "| after_backward  | (none)     |       |\n"
      "| after_step      | trace      |     0 |\n"
      "|                 | audit      |     5 |\n"
      "| before_valid    | (none)     |       |\n"
      "| after_epoch     | early_stop |    -3 |\n"
      "| after_fit       | trace      |     0 |\n"
      "| after_cancel    | audit      |     5 |\n"
      "\n"
      "| Stage          | Chain (call order)                                |\n"
      "| -------------- | ------------------------------------------------- |\n"
      "| gradients      | default: forward, loss, backward                  |\n"
      "| forward        | default: task.forward()                           |\n"
      "| backward       | trace(0) -> default: loss.backward()              |\n"
      "| optimizer_step | trace(0) -> audit(5) -> default: optimizer.step() |\n"
      "| zero_grad      | audit(5) -> default: optimizer.zero_grad()        |\n"
      "\n"
      "Optimizer: the task's default\n";
  const auto libs = r.out.find("\nLibraries:\n");
  REQUIRE(libs != std::string::npos);
  CHECK(r.out.substr(0, libs) == table);

  // With [optimizers.NAME] and groups, the optimizers the chains run for, in order.
  write_file(dir / "opt.toml",
             read_file(dir / "cfg.toml") +
                 "[optimizers.generator]\nname = \"adam\"\nlr = 0.0002\n"
                 "[optimizers.discriminator]\nname = \"sgd\"\nlr = 0.01\n"
                 "[[optimizers.discriminator.groups]]\nparams = \"discriminator.head.*\"\n"
                 "lr = 0.001\n");
  auto o = run_wick({"describe", (dir / "opt.toml").string()});
  INFO(o.err << o.out);
  REQUIRE(o.exit_code == 0);
  CHECK_THAT(o.out, Catch::Contains("| Optimizer | Over | Kind | lr | Groups |\n"
                                    "| --- | --- | --- | --- | --- |\n"
                                    "| generator | module generator | adam | 0.0002 | - |\n"
                                    "| discriminator | module discriminator | sgd | 0.01 | "
                                    "discriminator.head.* lr 0.001 |\n"));

  // Then the absolute path of each hook's library, in schedule order.
  const std::string d = fs::canonical(WICK_TEST_PLUGIN_DIR).string();
  CHECK(r.out.substr(libs) ==
        "\nLibraries:\n"
        "  early_stop: " +
            d +
            "/wick_thrower.so\n"
            "  trace: " +
            d +
            "/wick_recorder.so\n"
            "  audit: " +
            d + "/wick_recorder.so\n");
  // Describing trains nothing and runs no hook.
  CHECK(read_file(trace).empty());
}

TEST_CASE("a misspelt command is named, with the nearest one and the list") {
  auto r = run_wick({"lr_find", "cfg.toml"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("wick: error: no command 'lr_find' (did you mean "
                                      "'lr-find'?); the commands: fit, describe, check"));
  auto far = run_wick({"frobnicate"});
  CHECK(far.exit_code == 2);
  CHECK_THAT(far.err, Catch::StartsWith("wick: error: no command 'frobnicate'; the commands: "));
  CHECK(run_wick({"--version"}).exit_code == 0);  // options are CLI11's, as before
}

TEST_CASE("output that cannot be written fails the command but a reader that left early does not") {
  auto full = run({"/bin/sh", "-c", "exec \"$0\" plugins > /dev/full", WICK_BIN});
  CHECK(full.exit_code == 1);
  CHECK(full.err.find("wick: error: could not write standard output") != std::string::npos);
  auto help = run({"/bin/sh", "-c", "exec \"$0\" --help > /dev/full", WICK_BIN});
  CHECK(help.exit_code == 1);
  // A reader that reads nothing and is gone long before wick writes (`wick plugins | head`
  // alike): the output has nowhere to go, and that is what was asked.
  auto head = run({"/bin/bash", "-c", "\"$0\" plugins | true; exit ${PIPESTATUS[0]}", WICK_BIN});
  INFO(head.err);
  CHECK(head.exit_code == 0);
  CHECK(head.err.empty());
}
