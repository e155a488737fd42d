// Parity and memory: the reference workload trained by wick (its Trainer in this process, and
// `wick fit` as a separate process) against a hand-written LibTorch loop over the same
// tensors, from the same initial weights, in the same batch order.
#include <torch/torch.h>
#include "callgrind.hpp"

#include <sys/resource.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
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
  // The hand loop steps with torch::optim::Adam: the loops are compared on the same
  // arithmetic, so wick's one-pass Adam (a shipped config's fused = true) is off here.
  w.sets = {"trainer.epochs=1", "optimizer.fused=false"};
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
  Fetch f;
  auto b = ds.get(torch::arange(ds.size(), torch::kLong), f);
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

// CPU time of the whole process, all threads, as the trainer's summary.json train_cpu_s: on a
// machine shared with other jobs it barely moves while this process waits for a core, unlike
// wall time. Both sides compute on the same threads, so the ratio stays fair.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

long minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

struct HandResult {
  long faults = 0;  // minor page faults during the loop
  double samples_per_s = 0, seconds = 0, cpu_seconds = 0;
  std::int64_t samples = 0;
  std::string fingerprint;
};

// One epoch of the hand-written loop, timed like the trainer's (after the permutation). Out
// of line so that callgrind can count it alone (--toggle-collect=*hand_epoch*).
[[gnu::noinline]] void hand_epoch(torch::nn::Sequential& net, torch::optim::Adam& adam,
                                  const at::Tensor& X, const at::Tensor& Y, const HandSpec& h,
                                  HandResult& r) {
  const std::int64_t n = X.size(0), bs = h.batch_size;
  std::int64_t nb = h.drop_last ? n / bs : (n + bs - 1) / bs;
  if (h.max_steps > 0) nb = std::min(nb, h.max_steps);

  auto gen = at::make_generator<at::CPUGeneratorImpl>(h.perm_seed);
  at::Tensor perm = h.shuffle ? torch::randperm(n, gen, torch::TensorOptions().dtype(torch::kLong))
                              : torch::arange(n, torch::kLong);
  auto params = net->parameters();
  const long f0 = minor_faults();
  const double c0 = cpu_now();
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
  r.cpu_seconds = cpu_now() - c0;
  r.faults = minor_faults() - f0;
  r.samples_per_s = static_cast<double>(r.samples) / r.seconds;
}

// What a LibTorch user writes by hand: an MLP of Linear + ReLU, Adam, batches cut by
// index_select from a seeded permutation, gradients set to none after each step (as wick's
// default zero_grad does, so both sides do the same arithmetic).
HandResult hand_loop(const at::Tensor& X, const at::Tensor& Y, const std::vector<at::Tensor>& init,
                     const HandSpec& h) {
  if (init.empty() || init.size() % 2)
    throw std::runtime_error("the task's model is not an MLP of Linear layers");
  torch::nn::Sequential net;
  // Images [N, 1, 28, 28] go through a Flatten first, as in the task's own MLP.
  if (X.dim() > 2) net->push_back(torch::nn::Flatten());
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
  if (h.opt.kind != wick::OptimizerKind::adam)
    throw std::runtime_error("the hand-written loop only does adam");
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(h.opt.lr)
                                                 .betas({h.opt.betas[0], h.opt.betas[1]})
                                                 .eps(h.opt.eps)
                                                 .weight_decay(h.opt.weight_decay));
  net->train();
  HandResult r;
  hand_epoch(net, adam, X, Y, h, r);
  Sha256 sha;
  for (const auto& p : net->parameters()) {
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
    const auto kind = wick::optimizer_kind(d.name);
    if (!kind) throw std::runtime_error("the task's default optimizer '" + d.name + "' is unknown");
    h.opt.kind = *kind;
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

WickRun wick_in_process(Prepared& p) {
  const long f0 = minor_faults();
  auto res = p.trainer->fit();
  const long faults = minor_faults() - f0;
  if (res.status != FitResult::Status::completed)
    throw std::runtime_error("in-process fit failed: " + res.error + res.stop_reason);
  auto r = read_summary(p.out_dir);
  r.faults = faults;
  return r;
}

json ratio_json(const std::vector<double>& wick, const std::vector<double>& hand,
                const std::string& prefix = "") {
  std::vector<double> pairs;
  for (std::size_t i = 0; i < wick.size() && i < hand.size(); ++i)
    pairs.push_back(wick[i] / hand[i]);
  // Whichever side runs second in a pair runs faster (measured: ~14% on the MLP, the memory
  // the first one faulted in is reused), and the order alternates per repetition: the
  // geometric mean of each two consecutive pairs cancels it.
  std::vector<double> balanced;
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2)
    balanced.push_back(std::sqrt(pairs[i] * pairs[i + 1]));
  if (balanced.empty()) balanced = pairs;
  auto w = make_stats(wick), h = make_stats(hand), r = make_stats(pairs), b = make_stats(balanced);
  return {{prefix + "wick_samples_per_s", w.to_json()},
          {prefix + "hand_samples_per_s", h.to_json()},
          {prefix + "ratio_of_medians", h.median > 0 ? w.median / h.median : 0},
          {prefix + "pair_ratios", r.to_json()},
          {prefix + "balanced_ratios", b.to_json()}};
}

}  // namespace

// Instructions per training step of each side under callgrind: the stable evidence on a
// noisy machine. Counts only inside Trainer::Impl::train_epoch and hand_epoch (both include
// the epoch's permutation), in a child run of this binary.
json parity_callgrind(const Settings& s, const Workload& w) {
  json out;
  if (s.smoke) return {{"skipped", "smoke run"}};
  const std::string valgrind = find_in_path("valgrind");
  if (valgrind.empty()) return {{"skipped", "valgrind not found (apt-get install valgrind)"}};
  // The synthetic stand-in with the reference model, batch and optimizer, small and without
  // validation: per-step instructions do not depend on the data set, and valgrind is slow.
  const long steps = 20;
  // A step record every 10 steps (default 50), so the count includes metrics writing. The
  // Fashion-MNIST workload keeps its usual hooks, on its first 2048 samples.
  const bool fashion = w.config.find("fashion_mnist") != std::string::npos;
  std::string config = (fs::path(s.source_dir) / "bench/parity_synthetic.toml").string();
  std::vector<std::string> sets = {"trainer.epochs=1", "trainer.log_every=10", "task.samples=2048",
                                   "task.valid_samples=0", "optimizer.fused=false"};
  if (fashion) {
    config = w.config;
    sets = {"trainer.epochs=1", "trainer.log_every=10", "task.limit=2048", "optimizer.fused=false"};
  }
  const fs::path dir = fs::path(s.work_dir) / "parity_callgrind";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> argv = {valgrind,
                                   "--tool=callgrind",
                                   "--instr-atstart=no",
                                   "--collect-atstart=no",
                                   "--toggle-collect=*Trainer::Impl::train_epoch*",
                                   "--toggle-collect=*hand_epoch*",
                                   "--callgrind-out-file=" + (dir / "cg.out").string(),
                                   self_exe(),
                                   "--parity-callgrind",
                                   config,
                                   std::to_string(steps)};
  for (const auto& set : sets) argv.insert(argv.end(), {"--set", set});
  std::fprintf(stderr, "[parity] callgrind, %ld steps each side...\n", steps);
  auto r = run_child(argv);
  if (r.exit_code != 0)
    return {{"skipped", "callgrind run failed: " +
                            r.err.substr(r.err.size() > 2000 ? r.err.size() - 2000 : 0)}};
  const auto ir = read_callgrind_dumps(dir.string());
  if (!ir.count("wick") || !ir.count("hand") || ir.at("hand") <= 0)
    return {{"skipped", "no callgrind dumps could be read in " + dir.string()}};
  const double wi = ir.at("wick") / steps, hi = ir.at("hand") / steps;
  out["steps"] = steps;
  out["workload"] =
      fashion ? "samples/fashion_mnist/mlp.toml with its hooks, 2048 samples, log_every 10"
              : "synthetic stand-in (784-256-128-10, batch 64, Adam), 2048 samples, "
                "no validation, log_every 10";
  out["wick_ir_per_step"] = wi;
  out["hand_ir_per_step"] = hi;
  out["wick_extra_ir_per_step"] = wi - hi;
  out["ratio"] = wi / hi;
  return out;
}

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
  std::vector<double> wick_sps, hand_sps, wick_cpu, hand_cpu;
  std::vector<long> wick_faults, hand_faults;
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
    wick_cpu.push_back(wr.cpu_samples_per_s);
    wick_faults.push_back(wr.faults);
    hand_faults.push_back(hr.faults);
    hand_cpu.push_back(static_cast<double>(hr.samples) / hr.cpu_seconds);
    same_result = same_result && wr.fingerprint == hr.fingerprint;
    std::fprintf(stderr,
                 "[parity] in-process rep %d: wick %.0f, hand %.0f samples/s (%.3f); per CPU "
                 "second %.0f vs %.0f (%.3f); page faults %ld vs %ld\n",
                 r, wr.samples_per_s, hr.samples_per_s, wr.samples_per_s / hr.samples_per_s,
                 wick_cpu.back(), hand_cpu.back(), wick_cpu.back() / hand_cpu.back(), wr.faults,
                 hr.faults);
  }
  out["in_process"] = ratio_json(wick_sps, hand_sps);
  out["in_process"].update(ratio_json(wick_cpu, hand_cpu, "cpu_"));
  out["in_process"]["minor_page_faults"] = {{"wick_fit_call", wick_faults},
                                            {"hand_loop", hand_faults}};
  out["in_process"]["same_final_weights"] = same_result;
  if (copied)
    s.notes.push_back("the task's data is not a TensorDataset: the hand loop used a copy");

  // Separate processes: `wick fit` as users run it (with its usual plugins, outputs, start-up)
  // against the hand loop alone in its own process; also gives each side's peak RSS.
  std::vector<double> cw, ch, cwc, chc, rw, rh, cd, cdc;
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
    // The hand loop once more with glibc's malloc defaults, to show what keep_freed_memory()
    // (which `wick` applies at start) is worth.
    std::vector<std::string> default_argv = hand_argv;
    default_argv.push_back("--default-malloc");
    ChildResult wc, hc, dc;
    for (int k = 0; k < 3; ++k) {
      const int which = (k + r) % 3;  // rotate who goes first
      if (which == 0) {
        wc = run_child(wick_argv);
        if (wc.exit_code != 0)
          throw std::runtime_error("wick fit failed (" + std::to_string(wc.exit_code) +
                                   "): " + wc.err);
      } else {
        auto& c = which == 1 ? hc : dc;
        c = run_child(which == 1 ? hand_argv : default_argv);
        if (c.exit_code != 0) throw std::runtime_error("hand-written child failed: " + c.err);
      }
    }
    auto dj = json::parse(dc.out);
    cd.push_back(dj.at("samples_per_s").get<double>());
    cdc.push_back(dj.at("samples").get<double>() / dj.at("cpu_seconds").get<double>());
    auto wr = read_summary(dir);
    auto hj = json::parse(hc.out);
    cw.push_back(wr.samples_per_s);
    ch.push_back(hj.at("samples_per_s").get<double>());
    cwc.push_back(wr.cpu_samples_per_s);
    chc.push_back(hj.at("samples").get<double>() / hj.at("cpu_seconds").get<double>());
    rw.push_back(wc.max_rss_mb);
    rh.push_back(hc.max_rss_mb);
    child_same = child_same && wr.fingerprint == hj.value("fingerprint", "");
    std::fprintf(stderr,
                 "[parity] processes rep %d: wick fit %.0f, hand %.0f samples/s; per CPU second "
                 "%.0f vs %.0f; peak RSS %.0f vs %.0f MiB\n",
                 r, cw.back(), ch.back(), cwc.back(), chc.back(), rw.back(), rh.back());
  }
  out["processes"] = ratio_json(cw, ch);
  out["processes"].update(ratio_json(cwc, chc, "cpu_"));
  out["hand_default_malloc"] = {{"samples_per_s", make_stats(cd).to_json()},
                                {"cpu_samples_per_s", make_stats(cdc).to_json()}};
  out["processes"]["same_final_weights"] = child_same;

  out["callgrind"] = parity_callgrind(s, w);

  json mem;
  auto mw = make_stats(rw), mh = make_stats(rh);
  mem["wick_peak_rss_mb"] = mw.to_json();
  mem["hand_peak_rss_mb"] = mh.to_json();
  mem["ratio"] = mh.median > 0 ? mw.median / mh.median : 0;
  mem["method"] =
      "wait4() ru_maxrss of each child process: `wick fit` vs `wick_bench --hand-child`";
  out["memory"] = mem;
  return out;
}

int parity_callgrind_main(const std::string& config, const std::vector<std::string>& sets,
                          long steps) {
  try {
    Workload w;
    w.config = config;
    w.sets = sets;
    char tmpl[] = "/tmp/wick_bench_cg_XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    const fs::path dir(tmpl);
    {
      // Uncounted warm-up of both sides: lazy initialisation is not per-step cost.
      auto p = prepare(w, dir / "warmup", {"trainer.max_steps=3"});
      wick_in_process(p);
      hand_loop(p.x, p.y, p.init, hand_spec(*p.cfg, p.trainer->task(), p.trainer->epoch_seed(0)));
    }
    auto p = prepare(w, dir / "run", {"trainer.max_steps=" + std::to_string(steps)});
    auto spec = hand_spec(*p.cfg, p.trainer->task(), p.trainer->epoch_seed(0));
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
    wick_in_process(p);
    CALLGRIND_DUMP_STATS_AT("wick");
    CALLGRIND_ZERO_STATS;
    hand_loop(p.x, p.y, p.init, spec);
    CALLGRIND_DUMP_STATS_AT("hand");
    CALLGRIND_STOP_INSTRUMENTATION;
    std::error_code ec;
    fs::remove_all(dir, ec);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wick_bench --parity-callgrind: %s\n", e.what());
    return 1;
  }
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
    json j = {{"samples_per_s", r.samples_per_s},
              {"seconds", r.seconds},
              {"cpu_seconds", r.cpu_seconds},
              {"samples", r.samples},
              {"fingerprint", r.fingerprint},
              {"peak_rss_mb", self_peak_rss_mb()},
              {"data_copied", copied},
              {"page_faults", r.faults}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wick_bench --hand-child: %s\n", e.what());
    return 1;
  }
}

}  // namespace wick::bench
