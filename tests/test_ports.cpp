// The LibTorch examples ported to wick (samples/ports) train from their TOML files, and the
// mnist port (a torch::data MNIST dataset through wick::from_torch_dataset) resumes after
// kill -9 to the weights of a run never interrupted.
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdlib>

#include "support.hpp"

using namespace wick::test;

namespace {

const fs::path kPorts = fs::path(WICK_BINARY_DIR) / "samples" / "ports";
const fs::path kSamples = fs::path(WICK_SOURCE_DIR) / "samples" / "ports";
const fs::path kFashion = "/usr/share/datasets/fashion-mnist";

// torch::data::datasets::MNIST reads uncompressed IDX files: Debian's, gunzipped into DIR.
void unpack_mnist(const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                        "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const std::string cmd = "gunzip -c '" + (kFashion / (std::string(f) + ".gz")).string() +
                            "' > '" + (dir / f).string() + "'";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
}

// A binary PPM image, side x side, of one colour with some noise.
void write_ppm(const fs::path& p, int side, int r, int g, int b, unsigned seed) {
  std::string px;
  for (int i = 0; i < side * side; ++i) {
    seed = seed * 1103515245u + 12345u;
    const int noise = static_cast<int>((seed >> 16) % 32);
    for (int c : {r, g, b}) px += static_cast<char>(std::min(255, c + noise));
  }
  write_file(p, "P6\n# made by test_ports\n" + std::to_string(side) + " " + std::to_string(side) +
                    "\n255\n" + px);
}

// Red and blue images, labelled 0 and 1, in DIR/CLASS/ folders.
void write_images(const fs::path& dir, int per_class) {
  for (int k = 0; k < 2; ++k) {
    fs::create_directories(dir / (k ? "blue" : "red"));
    for (int i = 0; i < per_class; ++i)
      write_ppm(dir / (k ? "blue" : "red") / ("img" + std::to_string(i) + ".ppm"), 12, k ? 10 : 200,
                20, k ? 200 : 10, static_cast<unsigned>(i + 7 * k));
  }
}

std::string fingerprint(const fs::path& run) {
  return read_json(run / "summary.json")["model_fingerprint"];
}

}  // namespace

TEST_CASE("the regression port fits its stream from its TOML") {
  TempDir dir;
  auto r = run_wick({"fit", (kSamples / "regression" / "regression.toml").string(), "--plugin-path",
                     kPorts.string(), "--set", "trainer.epochs=3", "--set",
                     "trainer.output_dir=\"" + (dir / "run").string() + "\""});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["optimizer_steps"].get<int>() > 0);
  CHECK(s["optimizer_steps"].get<int>() <= 300);  // 3 epochs of steps_per_epoch = 100
  // The loss fell from the polynomial's scale (coefficients ~5) by orders of magnitude.
  std::vector<double> losses;
  for (auto& l : read_jsonl(dir / "run" / "metrics.jsonl"))
    if (l.contains("train/loss")) losses.push_back(l["train/loss"].get<double>());
  REQUIRE(losses.size() >= 2);
  CHECK(losses.back() < losses.front() / 10);
}

TEST_CASE("the mnist port resumes exactly after kill -9") {
  TempDir dir;
  unpack_mnist(dir / "mnist");
  // Its own TOML, cut short: 12 steps, a checkpoint every 4; the killed copy adds the test
  // plugins' fault hook, which kills the process at step 10 (after the checkpoint of step 8).
  const std::string toml = read_file(kSamples / "mnist" / "mnist.toml");
  write_file(dir / "whole.toml", toml);
  write_file(dir / "cut.toml", toml + "\n[[hooks]]\nplugin = \"fault\"\naction = \"kill\"\n" +
                                   "step = 10\n" + test_plugins_toml());
  auto fit = [&](const std::string& run, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"fit", (dir / (run + ".toml")).string(), "--plugin-path",
                                     kPorts.string()};
    for (const std::string& set :
         {"task.root=\"" + (dir / "mnist").string() + "\"", std::string("trainer.max_steps=12"),
          // On the CPU: the port's device = "auto" would take a GPU, whose convolution kernels
          // (cuDNN's, atomics) differ from run to run, so two whole runs would differ too.
          std::string("trainer.device=\"cpu\""), std::string("trainer.threads=1"),
          std::string("hooks.checkpoint.every_n_steps=4"),
          "trainer.output_dir=\"" + (dir / run).string() + "\""})
      args.insert(args.end(), {"--set", set});
    args.insert(args.end(), extra.begin(), extra.end());
    return run_wick(args);
  };
  auto whole = fit("whole");
  INFO(whole.err << whole.out);
  REQUIRE(whole.exit_code == 0);
  auto cut = fit("cut");
  INFO(cut.err << cut.out);
  REQUIRE(cut.exit_code == 128 + 9);
  auto resumed = fit("cut", {"--resume", "latest", "--set", "hooks.fault.enabled=false"});
  INFO(resumed.err << resumed.out);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.out.find("optimizer step 8)") != std::string::npos);
  CHECK(fingerprint(dir / "cut") == fingerprint(dir / "whole"));
  CHECK(read_json(dir / "whole" / "summary.json")["optimizer_steps"] == 12);
}

TEST_CASE("the custom-dataset port trains on listed PPM files with 2 loader threads") {
  TempDir dir;
  write_images(dir / "img", 8);
  std::string list;
  for (int i = 0; i < 8; ++i)
    for (const char* k : {"red", "blue"})
      list += std::string(k) + "/img" + std::to_string(i) + ".ppm " + (k[0] == 'b' ? "1" : "0") +
              (i < 6 ? " train\n" : " test\n");
  auto fit = [&](const std::string& list_text, const std::string& run,
                 std::vector<std::string> sets = {}) {
    write_file(dir / "img" / "info.txt", list_text);
    std::vector<std::string> args = {"fit",
                                     (kSamples / "custom_dataset" / "custom_dataset.toml").string(),
                                     "--plugin-path", kPorts.string()};
    sets.insert(sets.end(), {"task.list=\"" + (dir / "img" / "info.txt").string() + "\"",
                             "task.classes=2", "trainer.epochs=1", "trainer.threads=1",
                             "trainer.output_dir=\"" + (dir / run).string() + "\""});
    for (const auto& set : sets) args.insert(args.end(), {"--set", set});
    return run_wick(args);
  };
  auto r = fit(list, "run", {"task.image_size=64"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["optimizer_steps"] == 2);  // 12 training images in batches of 8
  CHECK(s["samples_seen"] == 12);
  CHECK(s.contains("valid/accuracy"));

  // A bad line is named with its file and line; a missing image with its path; a size the
  // network cannot take with its key.
  r = fit(list + "red/img0.ppm 7 train\n", "run2");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find((dir / "img" / "info.txt").string() + ":17: expected FILE LABEL") !=
        std::string::npos);
  r = fit("red/nosuch.ppm 0 train\n", "run3", {"task.image_size=64"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find((dir / "img" / "red" / "nosuch.ppm").string() + ": cannot open") !=
        std::string::npos);
  r = fit(list, "run4", {"task.image_size=32"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("'image_size'") != std::string::npos);
  CHECK(r.err.find("must be >= 64") != std::string::npos);
}

TEST_CASE("the transfer-learning port trains a head over a frozen TorchScript extractor") {
  TempDir dir;
  write_images(dir / "train", 6);
  write_images(dir / "valid", 2);
  // The extractor: a scripted module with a batch norm-free body, as convert.py's output
  // would be loaded: per-channel means (3 features), plus a parameter that must not move.
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module f(c10::QualifiedName("__torch__.Features"), cu);
  f.register_attribute("training", c10::BoolType::get(), true);
  f.register_parameter("gain", torch::full({1}, 2.0), false);
  f.define("def forward(self, x):\n    return torch.mean(x, [2, 3]) * self.gain\n");
  f.save((dir / "features.pt").string());

  auto r = run_wick(
      {"fit",           (kSamples / "transfer_learning" / "transfer_learning.toml").string(),
       "--plugin-path", kPorts.string(),
       "--set",         "task.features=\"" + (dir / "features.pt").string() + "\"",
       "--set",         "task.in_features=3",
       "--set",         "task.root=\"" + (dir / "train").string() + "\"",
       "--set",         "task.valid_root=\"" + (dir / "valid").string() + "\"",
       "--set",         "task.classes=[\"red\", \"blue\"]",
       "--set",         "task.image_size=8",
       "--set",         "trainer.epochs=10",
       "--set",         "optimizer.lr=0.1",
       "--set",         "trainer.threads=1",
       "--set",         "trainer.output_dir=\"" + (dir / "run").string() + "\""});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  auto s = read_json(dir / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["valid/accuracy"].get<double>() == 1.0);  // red against blue: the means separate them

  // One class is not a classification; class folders without images are named.
  auto check = [&](const std::string& root, const std::string& classes) {
    return run_wick({"check", (kSamples / "transfer_learning" / "transfer_learning.toml").string(),
                     "--plugin-path", kPorts.string(), "--set",
                     "task.features=\"" + (dir / "features.pt").string() + "\"", "--set",
                     "task.root=\"" + (dir / root).string() + "\"", "--set", "task.valid_root=\"\"",
                     "--set", "task.classes=" + classes});
  };
  r = check("train", "[\"red\"]");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("give at least two class folders") != std::string::npos);
  fs::create_directories(dir / "empty" / "red");
  fs::create_directories(dir / "empty" / "blue");
  r = check("empty", "[\"red\", \"blue\"]");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("no .ppm or .pgm images under " + (dir / "empty").string()) !=
        std::string::npos);
}
