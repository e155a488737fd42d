// The fashion_mnist task plugin on a slice of the real files, its messages for broken files,
// and the embedding host program.
#include <zlib.h>

#include <algorithm>
#include <cstdint>

#include "support.hpp"

using namespace wick::test;

namespace {

std::string config(const TempDir& dir, const std::string& task_extra, int epochs = 1) {
  return "[trainer]\nepochs = " + std::to_string(epochs) +
         "\nbatch_size = 64\nlog_every = 4\nseed = 0\noutput_dir = \"" + (dir / "run").string() +
         "\"\n[task]\nplugin = \"fashion_mnist\"\n" + task_extra +
         "[optimizer]\nname = \"adam\"\nlr = 1e-3\n[[hooks]]\nplugin = \"metrics_log\"\n";
}

std::string be32(std::uint32_t v) {
  std::string s;
  for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((v >> shift) & 0xFF);
  return s;
}

void write_gz(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// A well-formed split of n images (all pixels 0) and n labels.
void write_split(const fs::path& dir, const std::string& prefix, std::uint32_t n) {
  write_gz(dir / (prefix + "-images-idx3-ubyte.gz"),
           be32(0x803) + be32(n) + be32(28) + be32(28) + std::string(n * 784, '\0'));
  write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), be32(0x801) + be32(n) + std::string(n, '\3'));
}

}  // namespace

TEST_CASE("fashion_mnist trains an MLP for one epoch on the first 512 real samples") {
  TempDir dir;
  write_file(dir / "cfg.toml", config(dir, "model = \"mlp\"\nlimit = 512\n"));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("wick: completed: 1 epoch, 8 steps"));

  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["epochs"] == 1);
  CHECK(s["optimizer_steps"] == 8);  // 512 / 64
  CHECK(s["samples_seen"] == 512);
  // 8 Adam steps already beat chance (0.1) by far; a label/image mix-up would not.
  CHECK(s["valid/accuracy"].get<double>() > 0.3);
  CHECK(s["valid/loss"].get<double>() < 2.3);

  auto lines = read_jsonl(dir / "run" / "metrics.jsonl");
  REQUIRE(lines.size() == 3);  // steps 4 and 8, then the epoch
  CHECK(lines[0]["kind"] == "step");
  CHECK(lines[0]["step"] == 4);
  CHECK(lines[1]["step"] == 8);
  CHECK(lines[2]["kind"] == "epoch");
  CHECK(lines[2]["epoch"] == 0);
  CHECK(lines[2]["samples_seen"] == 512);
  CHECK(lines[2]["valid/accuracy"] == s["valid/accuracy"]);
  CHECK(lines[2].contains("time_s"));
  // metrics_log wrote the same three records as CSV rows.
  auto csv = read_file(dir / "run" / "metrics.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 4);
}

TEST_CASE("fashion_mnist builds and trains the CNN with batch norm") {
  TempDir dir;
  write_file(dir / "cfg.toml",
             config(dir,
                    "model = \"cnn\"\nbatch_norm = true\nchannels = [4, 8]\nhidden = [16]\n"
                    "limit = 128\n"));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["optimizer_steps"] == 2);
  CHECK(s.contains("valid/accuracy"));
}

TEST_CASE("fashion_mnist names the broken file and the Debian package") {
  TempDir dir;
  const fs::path data = dir / "data";
  fs::create_directories(data);
  std::string bad_file, expect;
  // A missing file is Debian's package to install; a damaged one, a copy to replace.
  std::string hint = "reinstall dataset-fashion-mnist";
  SECTION("missing folder") {
    // The labels are read first (the images' header is checked against their count).
    bad_file = (dir / "nowhere" / "train-labels-idx1-ubyte.gz").string();
    expect = "No such file";
    hint = "the data set comes from Debian: sudo apt-get install dataset-fashion-mnist";
    write_file(dir / "cfg.toml",
               config(dir, "data_dir = \"" + (dir / "nowhere").string() + "\"\n"));
  }
  SECTION("wrong magic") {
    write_split(data, "train", 4);
    write_split(data, "t10k", 4);
    // Labels where images belong.
    write_gz(data / "t10k-images-idx3-ubyte.gz", be32(0x801) + be32(4) + std::string(4, '\1'));
    bad_file = (data / "t10k-images-idx3-ubyte.gz").string();
    expect = "magic number 0x00000801, expected 0x00000803";
  }
  SECTION("truncated labels") {
    write_split(data, "train", 4);
    write_split(data, "t10k", 4);
    write_gz(data / "train-labels-idx1-ubyte.gz", be32(0x801) + be32(4) + std::string(2, '\1'));
    bad_file = (data / "train-labels-idx1-ubyte.gz").string();
    expect = "truncated: the header says 4 = 4 bytes of data, the file has 2";
  }
  SECTION("images and labels disagree") {
    write_split(data, "train", 4);
    write_split(data, "t10k", 4);
    write_gz(data / "train-labels-idx1-ubyte.gz", be32(0x801) + be32(3) + std::string(3, '\1'));
    bad_file = (data / "train-images-idx3-ubyte.gz").string();
    // From the images' header, before any image is read.
    expect = "the header's dimension 0 is 4, expected 3";
  }
  if (!bad_file.empty() && !fs::exists(dir / "cfg.toml"))
    write_file(dir / "cfg.toml", config(dir, "data_dir = \"" + data.string() + "\"\n"));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains(bad_file));
  CHECK_THAT(r.err, Catch::Contains(expect));
  CHECK_THAT(r.err, Catch::Contains(hint));
  // `wick check` loads the data too, and refuses it as fit does (README: exit 1, not 2).
  auto c = run_wick({"check", (dir / "cfg.toml").string()});
  INFO(c.err);
  CHECK(c.exit_code == 1);
  CHECK_THAT(c.err, Catch::Contains(bad_file));
}

TEST_CASE("a well-formed data_dir of our own is read (all-zero images, label 3)") {
  TempDir dir;
  fs::create_directories(dir / "data");
  write_split(dir / "data", "train", 64);
  write_split(dir / "data", "t10k", 32);
  // Relative: to the config file's folder, not the current directory (the test's).
  write_file(dir / "cfg.toml", config(dir, "data_dir = \"data\"\n"));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["samples_seen"] == 64);
}

TEST_CASE("the embedding sample trains its own task with hooks from TOML") {
  TempDir dir;
  auto r = run({std::string(WICK_BINARY_DIR) + "/bin/wick_embed_sample",
                std::string(WICK_SOURCE_DIR) + "/samples/embed/hooks.toml", "--set",
                "trainer.output_dir=\"" + (dir / "run").string() + "\"", "--set",
                "hooks.progress.mode=\"plain\""});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  // Its schedule shows the hooks from the file; progress and metrics_log really ran.
  CHECK_THAT(r.out, Catch::Contains("| after_step"));
  CHECK_THAT(r.out, Catch::Contains("progress"));
  CHECK_THAT(r.out, Catch::Contains("epoch 30/30 done"));
  CHECK_THAT(r.out, Catch::Contains("embed: completed"));
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["epochs"] == 30);
  // Two spirals are learnable by its small MLP.
  CHECK(s["valid/accuracy"].get<double>() > 0.9);
  auto csv = read_file(dir / "run" / "metrics.csv");
  CHECK(csv.rfind("kind,epoch,step,samples_seen,time_s,", 0) == 0);
  // After the fit, evaluate() gives the fit's last validation; predict() a row per sample
  // (512 samples, 2 classes, float32 after a 128-byte .npy header).
  char f1[64];
  std::snprintf(f1, sizeof f1, "embed: evaluate valid/f1 %.6f\n", s["valid/f1"].get<double>());
  CHECK_THAT(r.out, Catch::Contains(f1));
  CHECK(fs::file_size(dir / "run" / "valid_predictions.npy") == 128 + 512 * 2 * 4);
}
