// The wick command trains the synthetic task end to end and writes its run outputs.
#include "support.hpp"

using namespace wick::test;

TEST_CASE("wick fit trains the synthetic task and writes summary.json and metrics.jsonl") {
  TempDir dir;
  write_file(dir / "cfg.toml",
             "[trainer]\nepochs = 2\nbatch_size = 32\nlog_every = 8\n"
             "output_dir = \"" +
                 (dir / "run").string() +
                 "\"\n"
                 "[task]\nplugin = \"synthetic\"\nsamples = 256\n");
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["epochs"] == 2);
  CHECK(s["optimizer_steps"] == 16);  // 256 / 32 per epoch
  CHECK(s["samples_seen"] == 512);
  CHECK(s["model_fingerprint"].get<std::string>().size() == 64);
  CHECK(s.contains("valid/accuracy"));
  auto lines = read_jsonl(dir / "run" / "metrics.jsonl");
  int epochs = 0, steps = 0;
  for (auto& l : lines) (l["kind"] == "epoch" ? epochs : steps)++;
  CHECK(epochs == 2);
  CHECK(steps == 2);  // every 8 of 16 batches
}
