// The DCGAN sample (samples/gan): two models and two optimizers driven by the task through the
// Context, both losses logged, image grids written, and exact resume after kill -9.
#include "support.hpp"

using namespace wick::test;

namespace {

// 256 images / batch 32 = 8 batches an epoch, 16 in two; a checkpoint every 4 steps.
std::string config(const TempDir& d, const std::string& extra = "") {
  return "[trainer]\nepochs = 2\nseed = 3\nbatch_size = 32\nlog_every = 2\nthreads = 1\n"
         "output_dir = \"" +
         (d / "run").string() +
         "\"\n[task]\nplugin = \"gan\"\nlimit = 256\nlatent = 8\nfeatures = 4\n"
         "sample_every = 4\n"
         "[optimizers.generator]\nname = \"adam\"\nlr = 2e-4\nbetas = [0.5, 0.999]\n"
         "[optimizers.discriminator]\nname = \"adam\"\nlr = 2e-4\nbetas = [0.5, 0.999]\n"
         "[[hooks]]\nplugin = \"metrics_log\"\n"
         "[[hooks]]\nplugin = \"checkpoint\"\nevery_n_steps = 4\nkeep_last = 0\n" +
         extra + test_plugins_toml();
}

}  // namespace

TEST_CASE("the GAN sample trains two models, logs both losses, draws samples, resumes exactly") {
  TempDir ref;
  write_file(ref / "cfg.toml", config(ref));
  auto r = run_wick({"fit", (ref / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(ref / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["optimizer_steps"] == 16);
  int with_losses = 0;
  for (const auto& l : read_jsonl(ref / "run" / "metrics.jsonl"))
    if (l.contains("train/d_loss") && l.contains("train/g_loss") && l.contains("lr/generator"))
      ++with_losses;
  CHECK(with_losses == 10);  // 8 step records and 2 epoch records
  const auto png = read_file(ref / "run" / "samples" / "step-000004.png");
  REQUIRE(png.size() > 8);
  CHECK(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(fs::exists(ref / "run" / "samples" / "step-000016.png"));

  // Killed after step 10 (last checkpoint at 8), resumed: the same weights and history.
  TempDir d;
  write_file(d / "cfg.toml",
             config(d, "[[hooks]]\nplugin = \"fault\"\naction = \"kill\"\nstep = 10\n"));
  auto k = run_wick({"fit", (d / "cfg.toml").string()});
  REQUIRE(k.exit_code == 128 + 9);
  auto r2 = run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set",
                      "hooks.fault.enabled=false"});
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  CHECK(r2.out.find("(epoch 1, batch 0, optimizer step 8)") != std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["model_fingerprint"] == s["model_fingerprint"]);
  CHECK(logged_values(d) == logged_values(ref));
}

TEST_CASE("optimizer tables that do not fit the model's modules are refused before training") {
  TempDir d;
  auto cfg = config(d);
  SECTION("a module the model does not have, with a suggestion") {
    cfg.replace(cfg.find("[optimizers.discriminator]"), 26, "[optimizers.discriminatr]");
    write_file(d / "cfg.toml", cfg);
    auto r = run_wick({"fit", (d / "cfg.toml").string()});
    INFO(r.err << r.out);
    CHECK(r.exit_code == 2);
    const auto line =
        std::count(cfg.begin(), cfg.begin() + cfg.find("[optimizers.discriminatr]"), '\n') + 1;
    CHECK(r.err.find((d / "cfg.toml").string() + ":" + std::to_string(line) +
                     ":1: [optimizers.discriminatr] names no module of the task's model (its "
                     "modules: generator, discriminator); did you mean 'discriminator'?") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(d / "run" / "metrics.jsonl"));
  }
  SECTION("a module without an optimizer") {
    const std::string block =
        "[optimizers.discriminator]\nname = \"adam\"\nlr = 2e-4\nbetas = [0.5, 0.999]\n";
    cfg.erase(cfg.find(block), block.size());
    write_file(d / "cfg.toml", cfg);
    auto r = run_wick({"fit", (d / "cfg.toml").string()});
    INFO(r.err << r.out);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("module 'discriminator' has trainable parameters but no optimizer; add an "
                     "[optimizers.discriminator] table (or freeze it)") != std::string::npos);
  }
  SECTION("[optimizer] and [optimizers.NAME] together") {
    write_file(d / "cfg.toml", cfg + "[optimizer]\nname = \"sgd\"\n");
    auto r = run_wick({"check", (d / "cfg.toml").string()});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("[optimizers.NAME] tables and an [optimizer] table together") !=
          std::string::npos);
  }
}
