// `wick evaluate` and `wick predict`: a trained run's weights (a checkpoint of its output
// folder or a folder given, or the final weights its fit wrote) on a split of the task's data
// or on an input file. Of the hooks only the forward stage's handlers run (autocast, as the
// fit's validation ran it), and nothing in the run folder changes; only the files asked for
// (--json, --output) are written, by rank 0.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "wick/config.hpp"
#include "wick/files.hpp"
#include "wick/loader.hpp"
#include "wick/run_weights.hpp"
#include "wick/tensor_files.hpp"
#include "wick/trainer.hpp"

namespace fs = std::filesystem;

namespace wick::cli {

namespace {

struct UseArgs {
  ConfigArgs config;
  std::string checkpoint = "latest";
  std::string weights = "auto";  // auto, trained, or a hook's word (ema)
  std::string split;             // "" : valid for evaluate; predict needs --split or --input
  std::string input, output, json;
};

struct Loaded {
  Config cfg;
  std::unique_ptr<Trainer> trainer;
  UsedWeights weights;
};

Loaded load(const UseArgs& a) {
  auto cfg = Config::load(a.config.config, a.config.sets);
  PluginFinder finder(cfg.search_path(absolute_all(a.config.plugin_paths)));
  // The trainer builds the task's model and data; hooks are built (their parameters checked),
  // and of them only the forward stage's handlers run, as in the fit's validation.
  auto trainer = make_trainer(cfg, finder, {}, /*probe_batch_size=*/false);
  trainer->connect_for_evaluation();
  // The weights validation used (a hook's evaluation weights: EMA's) unless asked otherwise.
  auto used = load_run_weights(cfg, finder, *trainer, a.checkpoint,
                               /*evaluation=*/a.weights != "trained");
  check_weights_word(used, a.weights);
  if (trainer->run().is_main_process())
    std::fprintf(stderr, "wick: using %s\n", used.describe().c_str());
  return {std::move(cfg), std::move(trainer), std::move(used)};
}

Split split_of(const std::string& s) {
  if (s.empty() || s == "valid") return Split::valid;
  if (s == "train") return Split::train;
  throw ConfigError("--split " + s + ": give valid or train");
}

int cmd_evaluate(const UseArgs& a) {
  return guarded([&] {
    const Split split = split_of(a.split);
    auto l = load(a);
    const auto res = l.trainer->evaluate(split);
    if (!l.trainer->run().is_main_process()) return kOk;
    std::printf("| %s (%lld samples) | value |\n| --- | ---: |\n", to_string(split),
                static_cast<long long>(res.samples));
    for (const auto& [k, v] : res.values) std::printf("| %s | %.6g |\n", k.c_str(), v);
    if (!a.json.empty()) {
      nlohmann::json j;
      j["config"] = l.cfg.path();
      j["checkpoint"] = l.weights.source;
      j["weights"] = l.weights.weights;
      if (const auto& c = l.weights.checkpoint) {
        j["epoch"] = c->position.epoch;
        j["batch"] = c->position.batch;
        j["optimizer_step"] = c->optimizer_step;
      }
      j["split"] = to_string(split);
      j["samples"] = res.samples;
      j["values"] = nlohmann::json::object();
      for (const auto& [k, v] : res.values) j["values"][k] = v;
      write_file_atomic(a.json, j.dump(2) + "\n");
    }
    return kOk;
  });
}

int cmd_predict(const UseArgs& a) {
  return guarded([&] {
    if (a.split.empty() && a.input.empty())
      throw ConfigError("give the samples to predict: --split valid|train or --input FILE");
    if (!a.split.empty() && !a.input.empty())
      throw ConfigError("--split " + a.split + " and --input " + a.input +
                        ": give one of them, the samples to predict");
    // Refused before any work: an output wick cannot write.
    const auto ext = fs::path(a.output).extension().string();
    if (ext != ".npy" && ext != ".csv")
      throw ConfigError("--output " + a.output + ": name a .npy or .csv file");
    std::error_code ec;
    const auto folder = fs::absolute(a.output).parent_path();
    if (!fs::is_directory(folder, ec))
      throw ConfigError("--output " + a.output + ": no folder '" + folder.string() +
                        "'; create it first");
    const at::Tensor input = a.input.empty() ? at::Tensor() : read_tensor_file(a.input);
    auto l = load(a);
    const bool main = l.trainer->run().is_main_process();
    // A progress line every 5 s on long runs (rank 0's share: the ranks go at one pace).
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    auto progress = [&](std::int64_t done, std::int64_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (!main || now - last < std::chrono::seconds(5)) return;
      last = now;
      std::fprintf(stderr, "wick: predicted %lld of %lld samples\n", static_cast<long long>(done),
                   static_cast<long long>(total));
    };
    at::Tensor out;
    try {
      out = input.defined() ? l.trainer->predict(input, progress)
                            : l.trainer->predict(split_of(a.split), progress);
    } catch (const ConfigError& e) {
      if (!input.defined()) throw;
      throw ConfigError(a.input + ": " + e.what());
    }
    if (!main) return kOk;
    write_tensor_file(a.output, out);
    std::vector<std::int64_t> row(out.sizes().begin() + 1, out.sizes().end());
    std::string shape;
    for (auto d : row) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("wick: wrote %lld predictions of shape [%s] to %s in %.1f s\n",
                static_cast<long long>(out.size(0)), shape.c_str(), a.output.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return kOk;
  });
}

void add_weights_options(CLI::App* c, UseArgs& a) {
  c->add_option(
       "--checkpoint", a.checkpoint,
       "the weights: latest (default: the newest checkpoint, or without any the final weights), "
       "best, final (RUN_DIR/model.pt, written when the fit ended), a checkpoint folder or "
       "the path of a model.pt")
      ->type_name("latest|best|final|PATH");
  add_weights_option(c, a.weights);
}

}  // namespace

void add_evaluate_commands(CLI::App& app, Registry& r) {
  static UseArgs ev, pr;
  auto* e = app.add_subcommand(
      "evaluate",
      "loss and metrics of a checkpoint's weights over a whole split, as the fit's validation "
      "computes them; changes nothing in the run folder");
  add_config_args(e, ev.config);
  add_weights_options(e, ev);
  e->add_option("--split", ev.split, "valid (default) or train")->type_name("valid|train");
  e->add_option("--json", ev.json, "also write the values to FILE as JSON")->type_name("FILE");
  r.push_back({e, [] { return cmd_evaluate(ev); }});

  auto* p = app.add_subcommand(
      "predict",
      "the model's output for every sample of a split or an input file, in order, into a .npy "
      "(float32 [N, ...]) or .csv (a row per sample) file; changes nothing in the run folder");
  add_config_args(p, pr.config);
  add_weights_options(p, pr);
  p->add_option("--split", pr.split, "predict a split of the task's data: valid or train")
      ->type_name("valid|train");
  p->add_option("--input", pr.input,
                "predict the rows of FILE (.npy, .npz with \"input\", .csv with a header row, or "
                ".pt of torch.save), "
                "each one sample shaped as the task's inputs")
      ->type_name("FILE");
  p->add_option("--output", pr.output, "where to write them: FILE.npy or FILE.csv")
      ->type_name("FILE")
      ->required();
  r.push_back({p, [] { return cmd_predict(pr); }});
}

}  // namespace wick::cli
