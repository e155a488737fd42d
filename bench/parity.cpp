// Parity and memory: the reference workload trained by wick (its Trainer in this process, and
// `wick fit` as a separate process) against a hand-written LibTorch loop over the same
// tensors, from the same initial weights, in the same batch order.
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/sha256.hpp"
#include "wick/task.hpp"
#include "wick/trainer.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

struct Workload {
  std::string config;             // absolute path of the config file
  std::vector<std::string> sets;  // overrides applied to every run, both sides
  std::string description;
};

Workload choose_workload(Settings& s) {
  Workload w;
  const fs::path fashion = fs::path(s.source_dir) / "samples/fashion_mnist/mlp.toml";
  const fs::path fashion_lib = fs::path(s.plugin_dir) / "wick_fashion_mnist.so";
  if (!s.config.empty()) {
    w.config = fs::absolute(s.config).string();
    w.description = "config " + s.config;
  } else if (!s.smoke && fs::exists(fashion) && fs::exists(fashion_lib)) {
    w.config = fashion.string();
    w.description = "Fashion-MNIST MLP 784-256-128-10 (samples/fashion_mnist/mlp.toml)";
  } else {
    w.config = (fs::path(s.source_dir) / "bench/parity_synthetic.toml").string();
    w.description =
        "synthetic stand-in: MLP 784-256-128-10 on 60000 random samples of Fashion-MNIST shape "
        "(bench/parity_synthetic.toml)";
    if (!s.smoke)
      s.notes.push_back(
          "parity ran on the synthetic stand-in: samples/fashion_mnist/mlp.toml or its plugin "
          "is not built");
  }
  w.sets = {"trainer.epochs=1"};
  if (s.smoke) {
    // A few dozen steps: enough to run every code path, no timing meaning.
    w.sets.push_back("task.samples=1024");
    w.sets.push_back("task.valid_samples=128");
    w.description += " [smoke: 1024 samples]";
  }
  return w;
}

std::vector<std::string> with(std::vector<std::string> sets, const std::string& extra) {
  sets.push_back(extra);
  return sets;
}

std::pair<at::Tensor, at::Tensor> all_data(Dataset& ds, bool& copied) {
  // The same tensors the trainer indexes, without a copy when the task keeps them whole.
  if (auto* td = dynamic_cast<TensorDataset*>(&ds)) return {td->input(), td->target()};
  copied = true;
  auto b = ds.get(torch::arange(ds.size(), torch::kLong));
  return {b.input, b.target};
}

struct HandSpec {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  std::int64_t max_steps = 0;
  OptimizerOptions opt;
  std::uint64_t perm_seed = 0;
};

struct HandResult {
  double samples_per_s = 0, seconds = 0;
  std::int64_t samples = 0;
  std::string fingerprint;
};

// What a LibTorch user writes by hand: an MLP of Linear + ReLU, Adam, batches cut by
// index_select from a seeded permutation, gradients set to none after each step (as wick's
// default zero_grad does, so both sides do the same arithmetic).
HandResult hand_loop(const at::Tensor& X, const at::Tensor& Y, const std::vector<at::Tensor>& init,
                     const HandSpec& h) {
  if (init.empty() || init.size() % 2)
    throw std::runtime_error("the task's model is not an MLP of Linear layers");
  torch::nn::Sequential net;
  for (std::size_t i = 0; i < init.size(); i += 2) {
    if (init[i].dim() != 2 || init[i + 1].dim() != 1)
      throw std::runtime_error("the task's model is not an MLP of Linear layers");
    if (i) net->push_back(torch::nn::ReLU());
    net->push_back(torch::nn::Linear(init[i].size(1), init[i].size(0)));
  }
  {
    torch::NoGradGuard g;
    auto ps = net->parameters();
    for (std::size_t i = 0; i < ps.size(); ++i) ps[i].copy_(init[i]);
  }
  if (h.opt.name != "adam") throw std::runtime_error("the hand-written loop only does adam");
  torch::optim::Adam adam(net->parameters(),
                          torch::optim::AdamOptions(h.opt.lr)
                              .betas({h.opt.betas[0], h.opt.betas[1]})
                              .eps(h.opt.eps)
                              .weight_decay(h.opt.weight_decay));
  net->train();
  const std::int64_t n = X.size(0), bs = h.batch_size;
  std::int64_t nb = h.drop_last ? n / bs : (n + bs - 1) / bs;
  if (h.max_steps > 0) nb = std::min(nb, h.max_steps);

  auto gen = at::make_generator<at::CPUGeneratorImpl>(h.perm_seed);
  at::Tensor perm = h.shuffle ? torch::randperm(n, gen, torch::TensorOptions().dtype(torch::kLong))
                              : torch::arange(n, torch::kLong);
  auto params = net->parameters();
  HandResult r;
  const auto t0 = Clock::now();
  for (std::int64_t b = 0; b < nb; ++b) {
    auto idx = perm.slice(0, b * bs, std::min(n, (b + 1) * bs));
    auto x = X.index_select(0, idx);
    auto y = Y.index_select(0, idx);
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    adam.step();
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    r.samples += idx.size(0);
  }
  r.seconds = seconds_since(t0);
  r.samples_per_s = r.samples / r.seconds;
  Sha256 sha;
  for (const auto& p : params) {
    auto c = p.detach().contiguous();
    sha.update(c.data_ptr(), c.numel() * c.element_size());
  }
  r.fingerprint = sha.hex();
  return r;
}

HandSpec hand_spec(const Config& cfg, const Task& task, std::uint64_t perm_seed) {
  HandSpec h;
  const auto& t = cfg.trainer();
  h.batch_size = t.batch_size;
  h.shuffle = t.shuffle;
  h.drop_last = t.drop_last;
  h.max_steps = t.max_steps;
  h.opt = cfg.optimizer();
  if (!cfg.has_optimizer()) {
    auto d = task.default_optimizer();
    h.opt.name = d.name;
    h.opt.lr = d.lr;
  }
  h.perm_seed = perm_seed;
  return h;
}

// One trainer, built by the same code path as `wick fit`, plus what the hand loop needs to
// mirror it: the same data tensors, initial weights and permutation seed.
struct Prepared {
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<Config> cfg;
  at::Tensor x, y;
  std::vector<at::Tensor> init;
  bool copied = false;
  fs::path out_dir;
};

Prepared prepare(const Workload& w, const fs::path& out_dir, const std::vector<std::string>& more) {
  Prepared p;
  auto sets = with(w.sets, "trainer.output_dir=" + out_dir.string());
  for (const auto& m : more) sets.push_back(m);
  p.cfg = std::make_unique<Config>(Config::load(w.config, sets));
  PluginFinder finder(p.cfg->search_path());
  p.trainer = make_trainer(*p.cfg, finder);
  p.trainer->connect();
  for (const auto& t : p.trainer->model().parameters()) p.init.push_back(t.detach().clone());
  auto ds = p.trainer->task().train_data();
  std::tie(p.x, p.y) = all_data(*ds, p.copied);
  p.out_dir = out_dir;
  return p;
}

struct WickRun {
  double samples_per_s = 0;
  std::string fingerprint;
};

WickRun read_summary(const fs::path& dir) {
  std::ifstream in(dir / "summary.json");
  if (!in) throw std::runtime_error("no summary.json in " + dir.string());
  json j = json::parse(in);
  if (j.value("status", "") != "completed")
    throw std::runtime_error("wick run did not complete: " + j.dump());
  return {j.at("train_samples_per_s").get<double>(), j.value("model_fingerprint", "")};
}

WickRun wick_in_process(Prepared& p) {
  auto res = p.trainer->fit();
  if (res.status != FitResult::Status::completed)
    throw std::runtime_error("in-process fit failed: " + res.error + res.stop_reason);
  return read_summary(p.out_dir);
}

json ratio_json(const std::vector<double>& wick, const std::vector<double>& hand) {
  std::vector<double> pairs;
  for (std::size_t i = 0; i < wick.size() && i < hand.size(); ++i)
    pairs.push_back(wick[i] / hand[i]);
  auto w = make_stats(wick), h = make_stats(hand), r = make_stats(pairs);
  return {{"wick_samples_per_s", w.to_json()},
          {"hand_samples_per_s", h.to_json()},
          {"ratio_of_medians", h.median > 0 ? w.median / h.median : 0},
          {"pair_ratios", r.to_json()}};
}

}  // namespace

json run_parity(Settings& s) {
  const Workload w = choose_workload(s);
  std::fprintf(stderr, "[parity] %s\n", w.description.c_str());
  json out;
  out["workload"] = w.description;
  out["config"] = w.config;
  out["sets"] = w.sets;
  const fs::path work = fs::path(s.work_dir) / "parity";
  fs::create_directories(work);

  // Warm-up, both sides: OpenMP threads, allocator pools, lazily initialised kernels.
  std::uint64_t perm_seed = 0;
  {
    auto p = prepare(w, work / "warmup", {"trainer.max_steps=20"});
    perm_seed = p.trainer->epoch_seed(0);
    wick_in_process(p);
    hand_loop(p.x, p.y, p.init, hand_spec(*p.cfg, p.trainer->task(), perm_seed));
  }

  // In this process, alternating which side goes first.
  std::vector<double> wick_sps, hand_sps;
  bool same_result = true, copied = false;
  for (int r = 0; r < s.reps; ++r) {
    auto p = prepare(w, work / ("inproc" + std::to_string(r)), {});
    copied = copied || p.copied;
    auto spec = hand_spec(*p.cfg, p.trainer->task(), p.trainer->epoch_seed(0));
    WickRun wr;
    HandResult hr;
    if (r % 2 == 0) {
      wr = wick_in_process(p);
      hr = hand_loop(p.x, p.y, p.init, spec);
    } else {
      hr = hand_loop(p.x, p.y, p.init, spec);
      wr = wick_in_process(p);
    }
    wick_sps.push_back(wr.samples_per_s);
    hand_sps.push_back(hr.samples_per_s);
    same_result = same_result && wr.fingerprint == hr.fingerprint;
    std::fprintf(stderr, "[parity] in-process rep %d: wick %.0f, hand %.0f samples/s (%.3f)\n", r,
                 wr.samples_per_s, hr.samples_per_s, wr.samples_per_s / hr.samples_per_s);
  }
  out["in_process"] = ratio_json(wick_sps, hand_sps);
  out["in_process"]["same_final_weights"] = same_result;
  if (copied) s.notes.push_back("the task's data is not a TensorDataset: the hand loop used a copy");

  // Separate processes: `wick fit` as users run it (with its usual plugins, outputs, start-up)
  // against the hand loop alone in its own process; also gives each side's peak RSS.
  std::vector<double> cw, ch, rw, rh;
  bool child_same = true;
  for (int r = 0; r < s.child_reps; ++r) {
    const fs::path dir = work / ("child" + std::to_string(r));
    std::vector<std::string> wick_argv = {s.wick_bin, "fit", w.config};
    std::vector<std::string> hand_argv = {self_exe(), "--hand-child", w.config, "--perm-seed",
                                          std::to_string(perm_seed)};
    for (const auto& set : with(w.sets, "trainer.output_dir=" + dir.string())) {
      wick_argv.insert(wick_argv.end(), {"--set", set});
      hand_argv.insert(hand_argv.end(), {"--set", set});
    }
    ChildResult wc, hc;
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == (r % 2 == 0)) {
        wc = run_child(wick_argv);
        if (wc.exit_code != 0)
          throw std::runtime_error("wick fit failed (" + std::to_string(wc.exit_code) +
                                   "): " + wc.err);
      } else {
        hc = run_child(hand_argv);
        if (hc.exit_code != 0)
          throw std::runtime_error("hand-written child failed: " + hc.err);
      }
    }
    auto wr = read_summary(dir);
    auto hj = json::parse(hc.out);
    cw.push_back(wr.samples_per_s);
    ch.push_back(hj.at("samples_per_s").get<double>());
    rw.push_back(wc.max_rss_mb);
    rh.push_back(hc.max_rss_mb);
    child_same = child_same && wr.fingerprint == hj.value("fingerprint", "");
    std::fprintf(stderr,
                 "[parity] processes rep %d: wick fit %.0f, hand %.0f samples/s; peak RSS "
                 "%.0f vs %.0f MiB\n",
                 r, cw.back(), ch.back(), rw.back(), rh.back());
  }
  out["processes"] = ratio_json(cw, ch);
  out["processes"]["same_final_weights"] = child_same;

  json mem;
  auto mw = make_stats(rw), mh = make_stats(rh);
  mem["wick_peak_rss_mb"] = mw.to_json();
  mem["hand_peak_rss_mb"] = mh.to_json();
  mem["ratio"] = mh.median > 0 ? mw.median / mh.median : 0;
  mem["method"] = "wait4() ru_maxrss of each child process: `wick fit` vs `wick_bench --hand-child`";
  out["memory"] = mem;
  return out;
}

int hand_child_main(const std::string& config, const std::vector<std::string>& sets,
                    unsigned long long perm_seed) {
  try {
    auto cfg = Config::load(config, sets);
    PluginFinder finder(cfg.search_path());
    const auto& t = cfg.trainer();
    if (t.threads > 0) at::set_num_threads(static_cast<int>(t.threads));
    auto task = cfg.make_task(finder);
    // The trainer's initial weights: same seed, same construction.
    torch::manual_seed(static_cast<std::uint64_t>(t.seed));
    std::vector<at::Tensor> init;
    for (const auto& p : task->model()->parameters()) init.push_back(p.detach().clone());
    bool copied = false;
    auto [x, y] = all_data(*task->train_data(), copied);
    auto r = hand_loop(x, y, init, hand_spec(cfg, *task, perm_seed));
    json j = {{"samples_per_s", r.samples_per_s}, {"seconds", r.seconds},
              {"samples", r.samples},             {"fingerprint", r.fingerprint},
              {"peak_rss_mb", self_peak_rss_mb()}, {"data_copied", copied}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wick_bench --hand-child: %s\n", e.what());
    return 1;
  }
}

}  // namespace wick::bench
