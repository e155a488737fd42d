// The GPT sample (samples/gpt): byte-level token files made by its tokenize.py,
// samples/gpt/gpt.toml trained until the loss falls, exact resume after kill -9 in the middle of an
// epoch, token files that cannot be used refused with their name, and wick_gpt_generate's text
// from the trained weights.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <wick/config.hpp>
#include <wick/hardware.hpp>
#include <wick/loader.hpp>
#include <wick/run.hpp>
#include <wick/trainer.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/cuda_load.hpp"
#include "support.hpp"

using namespace wick::test;

namespace {

const fs::path kSample = fs::path(WICK_SOURCE_DIR) / "samples" / "gpt";
const fs::path kText = "/usr/share/common-licenses/GPL-3";  // in every Debian (base-files)

// d/data/train.bin and valid.bin from the GPL, as the sample's README makes them.
void make_data(const TempDir& d) {
  if (!fs::exists(kText)) skip(kText.string() + " is missing (Debian's base-files has it)");
  auto r = run({kPython, (kSample / "tokenize.py").string(), kText.string(), "--out",
                (d / "data").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  // 35,149 bytes: the last 10% (3,514) to valid.bin.
  REQUIRE(fs::file_size(d / "data" / "train.bin") == 2 * 31635);
  REQUIRE(fs::file_size(d / "data" / "valid.bin") == 2 * 3514);
}

// gpt.toml as shipped, copied into d (its data paths, relative to the config's folder, then
// name d/data), with `extra` hook tables and the test plugins' folder appended.
fs::path sample_config(const TempDir& d, const std::string& extra = "") {
  write_file(d / "cfg.toml", read_file(kSample / "gpt.toml") + extra + test_plugins_toml());
  return d / "cfg.toml";
}

// One thread (the machine is shared; a resume must use the count the run started with) and
// the run folder where logged_values() reads it.
std::vector<std::string> fit_args(const TempDir& d, const fs::path& cfg) {
  return {"fit",   cfg.string(),       "--set", "trainer.output_dir=" + (d / "run").string(),
          "--set", "trainer.threads=1"};
}

// gpt.toml trained once a process into its run folder, for the tests that read a trained run.
const TempDir& trained() {
  static TempDir ref;
  static bool done = false;
  if (!done) {
    make_data(ref);
    auto r = run_wick(fit_args(ref, sample_config(ref)));
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    done = true;
  }
  return ref;
}

}  // namespace

TEST_CASE("the GPT sample learns bytes of text and resumes exactly after kill -9") {
  const TempDir& ref = trained();
  auto s = read_json(ref / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["optimizer_steps"] == 120);  // 4 epochs x 60 batches / grad_accum 2
  // From ln 256 = 5.55 (uniform over bytes). The GPL's byte frequencies alone (a unigram
  // model) give 3.14 on the training part and 3.51 on the validation part; a bigram model 2.40
  // on the training part. Measured with seed 0, one thread: the last epoch's train/loss 2.642,
  // valid/loss 2.953 in fp32 (a CPU without native bf16), 2.609 and 2.922 under bf16 autocast
  // (gpt.toml's mixed_precision, on an Intel Xeon with AMX). The bounds leave 0.25 for another
  // CPU's rounding and still need more than byte frequencies.
  double train_loss = 0, valid_loss = 0;
  for (const auto& l : read_jsonl(ref / "run" / "metrics.jsonl"))
    if (l["kind"] == "epoch") {
      train_loss = l["train/loss"].get<double>();
      valid_loss = l["valid/loss"].get<double>();
    }
  CHECK(train_loss < 2.9);
  CHECK(valid_loss < 3.2);

  // Killed at batch 110 (epoch 1, batch 50); the last checkpoint is at optimizer step 50
  // (batch 100: epoch 1, batch 40): the stream's windows, the accumulation window and the lr
  // schedule all continue from the middle of an epoch.
  TempDir d;
  make_data(d);
  const auto cfg =
      sample_config(d, "[[hooks]]\nplugin = \"fault\"\naction = \"kill\"\nstep = 110\n");
  auto k = run_wick(fit_args(d, cfg));
  REQUIRE(k.exit_code == 128 + 9);
  auto args = fit_args(d, cfg);
  args.insert(args.end(), {"--resume", "latest", "--set", "hooks.fault.enabled=false"});
  auto r2 = run_wick(args);
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  CHECK(r2.out.find("(epoch 1, batch 40, optimizer step 50)") != std::string::npos);
  CHECK(read_json(d / "run" / "summary.json")["model_fingerprint"] == s["model_fingerprint"]);
  CHECK(logged_values(d) == logged_values(ref));
  CHECK(r2.err.find("is not the token file") == std::string::npos);

  // Resumed (from the end, nothing left to train) on a training file whose first token
  // changed: it goes on, and says that its windows are not the checkpoint's run's.
  auto tokens = read_file(d / "data" / "train.bin");
  tokens[0] = static_cast<char>(tokens[0] == 'a' ? 'b' : 'a');
  write_file(d / "data" / "train.bin", tokens);
  auto r3 = run_wick(args);
  INFO(r3.err << r3.out);
  CHECK(r3.exit_code == 0);
  CHECK(r3.err.find("wick: warning: task.data (" + (d / "data" / "train.bin").string() +
                    ") is not the token file the checkpoint's run trained on (its contents "
                    "differ)") != std::string::npos);
}

TEST_CASE("the GPT sample refuses token files it cannot use, naming them") {
  TempDir d;
  make_data(d);
  const auto cfg = sample_config(d);
  auto check_with = [&](const std::string& key, const fs::path& file) {
    return run_wick({"check", cfg.string(), "--set", "task." + key + "=" + file.string()});
  };
  SECTION("missing") {
    auto r = check_with("data", d / "nowhere.bin");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("'data' in [task] (plugin 'gpt') names a token file that cannot be used: " +
                     (d / "nowhere.bin").string() +
                     ": cannot open it (No such file or directory)") != std::string::npos);
  }
  SECTION("an odd size") {
    write_file(d / "odd.bin", "abc");
    auto r = check_with("valid_data", d / "odd.bin");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find((d / "odd.bin").string() +
                     ": its size (3 bytes) is odd, but a token file holds 2-byte tokens") !=
          std::string::npos);
  }
  SECTION("empty, or shorter than a window") {
    write_file(d / "empty.bin", "");
    auto r = check_with("data", d / "empty.bin");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find((d / "empty.bin").string() + ": the file is empty") != std::string::npos);
    write_file(d / "short.bin", std::string(2 * 64, 'a'));  // 64 tokens; a window is 65
    r = check_with("data", d / "short.bin");
    CHECK(r.exit_code == 2);
    CHECK(r.err.find((d / "short.bin").string() +
                     ": it holds 64 tokens, fewer than the 65 of one window") != std::string::npos);
  }
  SECTION("validation windows past what can be counted") {
    auto r = run_wick({"check", cfg.string(), "--set", "task.valid_batches=4611686018427387904"});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("'valid_batches' in [task] (plugin 'gpt') times trainer.valid_batch_size") !=
          std::string::npos);
  }
  SECTION("tokenize.py names an input it cannot read, in one line") {
    auto r = run({kPython, (kSample / "tokenize.py").string(), (d / "nowhere.txt").string(),
                  "--out", (d / "out").string()});
    CHECK(r.exit_code == 1);
    CHECK(r.err == "tokenize.py: cannot read " + (d / "nowhere.txt").string() +
                       ": No such file or directory\n");
  }
  SECTION("tokenize.py with no validation bytes removes an older text's valid.bin") {
    write_file(d / "text.txt", std::string(300, 'q'));
    write_file(d / "out" / "valid.bin", std::string(200, 'z'));
    auto r = run({kPython, (kSample / "tokenize.py").string(), (d / "text.txt").string(), "--out",
                  (d / "out").string(), "--valid-fraction", "0"});
    INFO(r.err << r.out);
    CHECK(r.exit_code == 0);
    CHECK_FALSE(fs::exists(d / "out" / "valid.bin"));
    CHECK(fs::file_size(d / "out" / "train.bin") == 600);
    CHECK(r.err.find("; the old valid.bin was removed; set [task] valid_data = \"\"") !=
          std::string::npos);
  }
  SECTION("evaluate without validation data does not send the user to the stream") {
    auto r = run_wick({"evaluate", (trained() / "cfg.toml").string(), "--set",
                       "trainer.output_dir=" + (trained() / "run").string(), "--set",
                       "task.valid_data=\"\""});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("configure the task's validation data (its training data is a stream") !=
          std::string::npos);
  }
  SECTION("a token outside the vocabulary stops the fit at the batch that holds it") {
    // Bytes of English text with a 100-token vocabulary: the letters d-z are 100-122, and the
    // first batch's 16 windows of 65 bytes hold some.
    auto args = fit_args(d, cfg);
    args.insert(args.end(), {"--set", "task.vocab=100"});
    auto r = run_wick(args);
    CHECK(r.exit_code == 1);
    CHECK(r.err.find((d / "data" / "train.bin").string() + ": token ") != std::string::npos);
    CHECK(r.err.find("is outside the vocabulary (100 ids)") != std::string::npos);
  }
}

namespace {

// wick_gpt_generate on the config in d (cfg.toml) and its run folder d/run, on one thread (the
// in-process reference's count: the same logits).
RunResult run_generate(const TempDir& d, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {WICK_GPT_GENERATE, (d / "cfg.toml").string(),
                                   "--set",           "trainer.output_dir=" + (d / "run").string(),
                                   "--set",           "trainer.threads=1"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv);
}
// Its output on the trained run, as token ids (--ids); its messages into `err` if given.
std::vector<std::int64_t> generate(std::vector<std::string> args, std::string* err = nullptr) {
  args.insert(args.begin(), "--ids");
  auto r = run_generate(trained(), args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  if (err) *err = r.err;
  std::vector<std::int64_t> ids;
  std::istringstream in(r.out);
  for (std::int64_t t; in >> t;) ids.push_back(t);
  return ids;
}

// A window of the model's 64 tokens: the last 64 of text[0, end) at its start, `pad` after
// them; and the position of the last.
std::pair<at::Tensor, std::int64_t> window_before(const std::vector<std::int64_t>& text,
                                                  std::size_t end, std::int64_t pad) {
  constexpr std::size_t kContext = 64;
  const std::size_t start = end > kContext ? end - kContext : 0;
  auto w = at::full({static_cast<std::int64_t>(kContext)}, pad, at::kLong);
  for (std::size_t k = start; k < end; ++k) w[static_cast<std::int64_t>(k - start)] = text[k];
  return {w, static_cast<std::int64_t>(end - start) - 1};
}

// The reference for the program's tokens: the trained weights in this process on `device`,
// through Trainer::predict, in fp32.
std::unique_ptr<wick::Trainer> reference(const TempDir& ref, const std::string& device) {
  auto cfg =
      wick::Config::load((ref / "cfg.toml").string(),
                         {"trainer.output_dir=" + (ref / "run").string(), "trainer.threads=1",
                          "trainer.device=" + device, "hooks.mixed_precision.enabled=false"});
  wick::PluginFinder finder(cfg.search_path());
  auto trainer = wick::make_trainer(cfg, finder, {}, /*probe_batch_size=*/false);
  trainer->load_model_file((ref / "run" / "model.pt").string());
  return trainer;
}

// Greedy: each of `greedy`'s tokens after the first n the most likely after the text before
// it, within `tolerance` (another batch's rounding may reorder a near tie), by the reference's
// predict of windows padded after the text (the causal attention keeps the padding out of the
// logits read), all in one predict.
void check_greedy(wick::Trainer& reference, const std::vector<std::int64_t>& greedy, std::size_t n,
                  float tolerance) {
  std::vector<at::Tensor> windows;
  std::vector<std::int64_t> last;
  for (std::size_t j = n; j < greedy.size(); ++j) {
    auto [w, pos] = window_before(greedy, j, 255);
    windows.push_back(w);
    last.push_back(pos);
  }
  const at::Tensor logits = reference.predict(at::stack(windows)).to(at::kCPU);
  REQUIRE(logits.sizes() == at::IntArrayRef({static_cast<std::int64_t>(windows.size()), 64, 256}));
  for (std::size_t r = 0; r < windows.size(); ++r) {
    const at::Tensor row = logits[static_cast<std::int64_t>(r)][last[r]];
    INFO("greedy token " << n + r);
    CHECK(row[greedy[n + r]].item<float>() >= row.max().item<float>() - tolerance);
  }
}

// Of 300 bytes from the whole distribution after a newline, those of the GPL's kind:
// printable ASCII and newlines.
int gpl_like(const std::vector<std::int64_t>& whole) {
  REQUIRE(whole.size() == 301);
  int ascii = 0;
  for (std::size_t i = 1; i < whole.size(); ++i)
    ascii += (whole[i] >= 32 && whole[i] < 127) || whole[i] == 10;
  return ascii;
}

}  // namespace

TEST_CASE("wick_gpt_generate continues a prompt with the tokens the trained model predicts") {
  const TempDir& ref = trained();
  // "This License" as bytes: 12 tokens, and 80 more run past the 64-token context.
  const std::string text = "This License";
  std::string prompt;
  for (const unsigned char c : text) prompt += (prompt.empty() ? "" : " ") + std::to_string(c);
  const std::size_t n = text.size();
  // In fp32, against predict's fp32 below: the same logits but for the rounding of the
  // decoder's other order (its cached keys and values, the last position's logits alone).
  const auto greedy =
      generate({"--dtype", "fp32", "--prompt", prompt, "--tokens", "80", "--temperature", "0"});
  const auto sampled = generate({"--dtype", "fp32", "--prompt", prompt, "--tokens", "80",
                                 "--temperature", "0.5", "--top-k", "5", "--seed", "7"});
  REQUIRE(greedy.size() == n + 80);
  REQUIRE(sampled.size() == n + 80);
  for (std::size_t i = 0; i < n; ++i) CHECK(greedy[i] == text[i]);

  auto trainer = reference(ref, "cpu");
  check_greedy(*trainer, greedy, n, 1e-4f);

  // Sampled: drawn again here from predict's logits of a padded window a token, as the
  // program draws them from its decoder's, nanoGPT's way (logits / temperature, the top 5
  // kept, softmax, one draw of a generator seeded 7): the same tokens.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  std::vector<std::int64_t> again(sampled.begin(),
                                  sampled.begin() + static_cast<std::ptrdiff_t>(n));
  while (again.size() < sampled.size()) {
    auto [w, pos] = window_before(again, again.size(), 0);
    const at::Tensor l = trainer->predict(w.unsqueeze(0))[0][pos].to(at::kDouble);
    at::Tensor s = (l - l.max()) / 0.5;
    s = s.masked_fill(s < std::get<0>(s.topk(5))[4].item<double>(), -INFINITY);
    again.push_back(at::multinomial(s.softmax(0), 1, false, gen).item<std::int64_t>());
  }
  CHECK(again == sampled);

  // A seed gives one text, another seed another; the top 1 is the greedy text.
  CHECK(generate({"--dtype", "fp32", "--prompt", prompt, "--tokens", "80", "--temperature", "0.5",
                  "--top-k", "5", "--seed", "7"}) == sampled);
  CHECK(generate({"--dtype", "fp32", "--prompt", prompt, "--tokens", "80", "--temperature", "0.5",
                  "--top-k", "5", "--seed", "8"}) != sampled);
  CHECK(generate({"--dtype", "fp32", "--prompt", prompt, "--tokens", "80", "--top-k", "1"}) ==
        greedy);

  // As bytes, from a checkpoint folder's weights: the prompt, then the text.
  std::vector<fs::path> folders;  // oldest first
  for (const auto& e : fs::directory_iterator(ref / "run" / "checkpoints"))
    if (e.is_directory() && e.path().filename().string().rfind("ckpt-", 0) == 0)
      folders.push_back(e.path());
  std::sort(folders.begin(), folders.end());
  REQUIRE(folders.size() >= 2);
  // 20 bytes with the weights `w` names (none: the default).
  auto with_weights = [&](const std::string& w) {
    std::vector<std::string> args = {"--prompt", text, "--tokens", "20", "--seed", "3"};
    if (!w.empty()) args.insert(args.begin(), {"--weights", w});
    auto r = run_generate(ref, args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return r;
  };
  const auto early = with_weights(folders.front().string());
  CHECK(early.out.size() == n + 20 + 1);  // and a newline
  CHECK(early.out.rfind(text, 0) == 0);
  CHECK(early.err.find("using the trained weights of " + folders.front().string()) !=
        std::string::npos);
  // The names wick predict's --checkpoint takes: final (the default) is the run's model.pt,
  // which its path names too; latest the newest folder, the fit's end (the same weights).
  // (The text can match the early folder's: a trained model's likely bytes.)
  const auto final_run = with_weights("");
  const auto final_bytes = final_run.out;
  CHECK(final_run.err.find("using the final weights") != std::string::npos);
  CHECK(final_run.err.find((ref / "run" / "model.pt").string()) != std::string::npos);
  // --dtype auto (the default): bf16 where this CPU runs it natively, as gpt.toml's fit.
  const bool bf16 = wick::native_bf16(wick::Device{});
  CHECK(final_run.err.find(std::string("decoding in ") + (bf16 ? "bf16 (autocast)" : "fp32") +
                           " on cpu") != std::string::npos);
  CHECK(with_weights((ref / "run" / "model.pt").string()).out == final_bytes);
  const auto latest = with_weights("latest");
  CHECK(latest.out == final_bytes);
  CHECK(latest.err.find("using the trained weights of " + folders.back().string()) !=
        std::string::npos);

  // From the whole distribution (in bf16 where the CPU has it natively, the cached decoding
  // under autocast), the trained model writes the GPL's kind of bytes: printable
  // ASCII and newlines (measured on an AMD EPYC, seeds 1-5, 300 tokens each: 97-99% trained
  // under gpt.toml's bf16 autocast, 98-99% in fp32), where a model that learnt nothing would
  // give 96 of 256 byte values (38%).
  CHECK(gpl_like(generate({"--prompt", "10", "--tokens", "300", "--temperature", "1", "--top-k",
                           "0", "--seed", "1"})) >= 270);
}

TEST_CASE("wick_gpt_generate on the GPU: the tokens predict gives there, and bf16 from the cache",
          "[cuda]") {
  // LibTorch keeps its first answer to whether it has CUDA, and its CUDA side comes with
  // wick's (this program links the CPU side only): load that first. Unloaded, a GPU machine
  // skipped this (the GPU run of 2026-12-04).
  if (const auto why = wick::cuda::load(); !why.empty()) skip("no CUDA here: " + why);
  if (!torch::cuda::is_available())
    skip("no CUDA device here (torch::cuda::is_available() is false)");
  const TempDir& ref = trained();
  // The CPU-trained run's weights on the GPU, in fp32 against predict there: 80 tokens after
  // 4, past the 64-token context. (A GPU's fp32 products may order their sums otherwise than
  // predict's batch of windows: a wider tolerance than the CPU's, not yet measured on a GPU.)
  const std::vector<std::string> on_gpu = {"--set", "trainer.device=cuda"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), on_gpu.begin(), on_gpu.end());
    return args;
  };
  const auto greedy = generate(with(
      {"--dtype", "fp32", "--prompt", "84 104 105 115", "--tokens", "80", "--temperature", "0"}));
  REQUIRE(greedy.size() == 84);
  auto trainer = reference(ref, "cuda");
  check_greedy(*trainer, greedy, 4, 1e-3f);
  // bf16 autocast on the GPU (flash or memory-efficient attention of one query over the
  // cached keys): the GPL's kind of bytes, as on the CPU.
  std::string err;
  const auto whole = generate(with({"--dtype", "bf16", "--prompt", "10", "--tokens", "300",
                                    "--temperature", "1", "--top-k", "0", "--seed", "1"}),
                              &err);
  CHECK(err.find("decoding in bf16 (autocast) on cuda") != std::string::npos);
  CHECK(gpl_like(whole) >= 270);
}

TEST_CASE("wick_gpt_generate refuses what it cannot use, naming it") {
  // Untrained: no weights to load, and each other refusal comes before they are read.
  TempDir d;
  make_data(d);
  sample_config(d);
  auto gen = [&](const std::vector<std::string>& args) { return run_generate(d, args); };
  auto r = gen({});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--weights final: no '" + (d / "run" / "model.pt").string() +
                   "'; a fit writes it when it ends") != std::string::npos);
  r = gen({"--weights", "best"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--weights best: no checkpoint folder '" +
                   (d / "run" / "checkpoints" / "best").string() + "'") != std::string::npos);
  r = gen({"--ids", "--prompt", "65 256"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--prompt holds token 256, outside the model's vocabulary (256 ids)") !=
        std::string::npos);
  r = gen({"--temperature", "-1"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--temperature -1: give a finite number >= 0") != std::string::npos);
  r = gen({"--set", "task.vocab=300"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("the model has 300 token ids, more than a byte holds: give --ids") !=
        std::string::npos);
  r = gen({"--ids"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--ids needs --prompt: the token ids to continue") != std::string::npos);
  r = gen({"--dtype", "half"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--dtype half: give auto, bf16 or fp32") != std::string::npos);
  r = gen({"--tokens", "many"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--tokens many: give a whole number >= 0") != std::string::npos);
  r = gen({"--top_k", "5"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("unknown option --top_k (--help lists them)") != std::string::npos);
  r = gen({"--prompt", ""});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--prompt is empty; give at least one token") != std::string::npos);
  r = gen({"--seed"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--seed needs a value") != std::string::npos);
  r = gen({"second.toml"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("one CONFIG only; 'second.toml' is another") != std::string::npos);
  r = run({WICK_GPT_GENERATE, "--tokens", "5"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("give the CONFIG the model was trained with") != std::string::npos);
  // A plugin the config names that is not there, and a task that is not the GPT's.
  r = run({WICK_GPT_GENERATE, sample_config(d, "[[hooks]]\nplugin = \"nosuch\"\n").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("no plugin named 'nosuch'") != std::string::npos);
  // A task named gpt that is not the sample's, and the only one on the plugin path: a copy
  // of libwick whose default plugin folder (beside it) has no sample. Refused before any
  // weights are read, naming its file.
  const fs::path foreign = fs::path(WICK_BINARY_DIR) / "tests" / "foreign_gpt";
  fs::create_directories(d / "lib");
  fs::copy_file(fs::canonical(fs::path(WICK_BINARY_DIR) / "lib" / "libwick.so.0"),
                d / "lib" / "libwick.so.0");
  write_file(d / "foreign.toml",
             "[plugins]\npath = [\"" + foreign.string() + "\"]\n[task]\nplugin = \"gpt\"\n");
  r = run({WICK_GPT_GENERATE, (d / "foreign.toml").string()},
          {"LD_LIBRARY_PATH=" + (d / "lib").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("the task plugin 'gpt' (" + (foreign / "wick_gpt.so").string() +
                   ") is not the GPT sample's: its model has no parameter wte.weight of the "
                   "decoder's shape") != std::string::npos);
  write_file(d / "other.toml", "[task]\nplugin = \"synthetic\"\n");
  r = run({WICK_GPT_GENERATE, (d / "other.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK(
      r.err.find("CONFIG's task is 'synthetic', not the GPT sample's ([task] plugin = \"gpt\")") !=
      std::string::npos);
}
