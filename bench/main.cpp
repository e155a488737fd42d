// wick_bench: is wick as fast as a hand-written LibTorch loop? Measures parity, dispatch,
// start-up, memory and data-parallel scaling in one run and writes results.json and a Markdown
// table (results.md beside it, and stdout). Timings are noisy on a shared machine: every comparison
// is a ratio of measurements taken in the same run, alternated and repeated; callgrind counts are
// the stable evidence for dispatch.
//
//   wick_bench [--out FILE] [--smoke] [--config CFG] [--reps N] [--child-reps N]
//              [--ddp-rounds N] [--peers-workloads mlp,cnn,transformer,gan,gpt] [--only
//              parity,dispatch,callgrind,startup,ddp,loader,metrics,torchscript,restart,profiler,python,
//              peers,memory_tools]
#include <torch/version.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include "common.hpp"
#include "wick/hardware.hpp"
#include "wick/system.hpp"

namespace fs = std::filesystem;
using namespace wick::bench;

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pct(double spread) {
  return "±" + fmt("%.1f", spread * 100) + "%";
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

// The CPU a run measured on, with the features that decide LibTorch's CPU kernels: machines of
// one kind differ there (AMD EPYC with AVX512-BF16, Intel Xeon with AMX), and a kept section may
// come from another machine than the one that re-measured the rest.
std::string cpu_name() {
  const auto& f = wick::cpu_features();
  std::string features;
  for (const auto& [on, name] :
       {std::pair{f.avx2, "avx2"}, std::pair{f.avx512f, "avx512f"},
        std::pair{f.avx512_bf16, "avx512_bf16"}, std::pair{f.amx_bf16, "amx_bf16"}})
    if (on) features += std::string(features.empty() ? "" : " ") + name;
  return (f.model.empty() ? std::string("unknown CPU") : f.model) + " (" +
         (features.empty() ? "no avx2" : features) + ")";
}

double num(const json& j, const char* a, const char* b = nullptr, const char* c = nullptr) {
  const json* p = &j;
  for (const char* k : {a, b, c}) {
    if (!k) break;
    if (!p->is_object() || !p->contains(k)) return -1;
    p = &(*p)[k];
  }
  return p->is_number() ? p->get<double>() : -1;
}

// Parity's wick / hand ratio: the median of order-balanced pairs, or, in results kept from a
// run before they were measured, of plain pairs.
double parity_ratio(const json& side, const std::string& prefix) {
  const auto key =
      prefix + (side.contains(prefix + "balanced_ratios") ? "balanced_ratios" : "pair_ratios");
  return num(side, key.c_str(), "median");
}

struct Target {
  std::string name, rule;
  double value;
  bool met;
};

std::vector<Target> targets(const json& r) {
  std::vector<Target> t;
  if (r.contains("parity")) {
    const json none = json::object();
    const auto& in = r["parity"].contains("in_process") ? r["parity"]["in_process"] : none;
    double ratio = parity_ratio(in, "");
    t.push_back({"parity: wick / hand-written samples/s, wall time (in-process)", ">= 0.98", ratio,
                 ratio >= 0.98});
    double cpu = parity_ratio(in, "cpu_");
    t.push_back({"parity: wick / hand-written samples per CPU second (in-process)", ">= 0.98", cpu,
                 cpu >= 0.98});
    double mem = num(r["parity"], "memory", "ratio");
    t.push_back({"memory: wick / hand-written peak RSS", "<= 1.10", mem, mem > 0 && mem <= 1.10});
  }
  if (r.contains("dispatch")) {
    const auto& rows = r["dispatch"]["rows"];
    double added = rows.empty() ? -1 : rows.back()["trainer_added_us_per_step"].get<double>();
    t.push_back(
        {"dispatch: 32 hooks on every point, added us per step", "<= 3", added, added <= 3.0});
    double ns = num(r["dispatch"], "unsubscribed_point_ns", "median");
    t.push_back({"dispatch: point with no subscriber, ns", "<= 10", ns, ns >= 0 && ns <= 10});
  }
  if (r.contains("startup")) {
    double d = num(r["startup"], "describe_wall_s", "median");
    t.push_back({"start-up: wick describe with 10 plugins, s", "<= 0.6", d, d >= 0 && d <= 0.6});
  }
  if (r.contains("ddp") && r["ddp"].contains("cnn")) {
    double x = num(r["ddp"]["cnn"], "ratio", "median");
    t.push_back({"ddp: CNN samples/s, 2 ranks / 1 rank (1 thread each)", ">= 1.6", x, x >= 1.6});
  }
  if (r.contains("loader")) {
    double x = num(r["loader"], "ratio", "median");
    t.push_back({"loader: samples/s, 1 ms/sample data, num_workers 2 / 0", ">= 1.7", x, x >= 1.7});
  }
  if (r.contains("metrics")) {
    double x = num(r["metrics"], "share", "median");
    t.push_back({"metrics: accuracy + f1 + confusion_matrix updates / MLP eval step (batch 256)",
                 "<= 0.05", x, x <= 0.05});
  }
  if (r.contains("torchscript")) {
    double x = num(r["torchscript"], "ratio", "median");
    t.push_back({"torchscript: scripted MLP samples/s / built-in C++ MLP (Fashion-MNIST)",
                 ">= 0.95", x, x >= 0.95});
  }
  if (r.contains("python") && r["python"].contains("cnn")) {
    double x = num(r["python"]["cnn"], "ratio", "median");
    t.push_back({"python: cnn.toml as shipped samples/s / plain PyTorch fp32 loop (1 thread)",
                 ">= 1.7", x, x >= 1.7});
    x = num(r["python"]["mlp"], "ratio", "median");
    t.push_back(
        {"python: mlp.toml samples/s / plain PyTorch loop (1 thread)", ">= 1.15", x, x >= 1.15});
  }
  if (r.contains("profiler")) {
    double x = num(r["profiler"], "overhead", "median");
    t.push_back({"profiler: --profile's cost per MLP step (samples/s off / on - 1)", "<= 0.02", x,
                 x <= 0.02});
  }
  if (r.contains("peers") && !r["peers"].contains("skipped")) {
    const auto& p = r["peers"];
    for (const char* w : {"mlp", "cnn", "transformer", "gan", "gpt"}) {
      if (!p.contains(w)) continue;
      std::map<std::string, json> row;
      for (const auto& x : p[w]["rows"]) row[x["row"].get<std::string>()] = x;
      auto rate = [&](const std::string& name) {
        return row.count(name) ? num(row[name], "samples_per_s", "median") : -1;
      };
      auto acc = [&](const std::string& name) {
        return row.count(name) && row[name].contains("valid_accuracy")
                   ? row[name]["valid_accuracy"].get<double>()
                   : -1;
      };
      const std::string shipped = "wick (as shipped)";
      // Against the faster of Lightning's two rows, at equal accuracy (within 0.5 points).
      const double lightning =
          std::max(rate("Lightning (progress bar, logger)"), rate("Lightning (no bar, no logger)"));
      auto equal_acc = [&](const std::string& peer) {
        return acc(shipped) < 0 || acc(peer) < 0 || acc(shipped) >= acc(peer) - 0.005;
      };
      double x = rate(shipped) / lightning;
      t.push_back({std::string("peers ") + w +
                       ": wick as shipped / Lightning samples/s, at "
                       "equal accuracy",
                   ">= 1.5", x, x >= 1.5 && equal_acc("Lightning (no bar, no logger)")});
      if (row.count("HF Trainer")) {
        x = rate(shipped) / rate("HF Trainer");
        t.push_back({std::string("peers ") + w +
                         ": wick as shipped / HF Trainer samples/s, at "
                         "equal accuracy",
                     ">= 1.5", x, x >= 1.5 && equal_acc("HF Trainer")});
      }
      const std::string fp32 = row.count("wick fp32") ? "wick fp32" : shipped;
      if (!row[fp32]["tax"]["samples"].empty()) {  // gpt has no hand-written loop
        x = num(row[fp32], "tax", "median");
        t.push_back({std::string("peers ") + w + ": wick's tax over the hand-written LibTorch loop",
                     "<= 0.02", x, x <= 0.02});
      }
      x = num(row[shipped], "start_to_first_step_s", "median") /
          num(row["Lightning (no bar, no logger)"], "start_to_first_step_s", "median");
      t.push_back({std::string("peers ") + w + ": wick's start to first step / Lightning's", "< 1",
                   x, x > 0 && x < 1});
    }
  }
  // Last: the table above indexes the targets before these by position.
  if (r.contains("busy") && r["busy"].contains("hogs")) {
    double x = r["busy"].value("default_vs_best_fixed", 0.0);
    t.push_back({"busy neighbour: wick's default samples/s / its best fixed threads", ">= 0.9", x,
                 x >= 0.9});
    x = r["busy"].value("default_vs_pytorch_default", 0.0);
    t.push_back(
        {"busy neighbour: wick's default / the PyTorch loop's default", ">= 10", x, x >= 10});
  }
  return t;
}

std::string markdown(const json& r) {
  std::ostringstream md;
  const auto& m = r["meta"];
  md << "# wick benchmark" << (m.value("smoke", false) ? " (smoke run: no timing meaning)" : "")
     << "\n\n"
     << m.value("date", "") << "; " << m.value("cpu", std::string("CPU not recorded")) << ", "
     << m.value("cores", 0) << " cores, load average " << fmt("%.1f", m.value("load_before", 0.0))
     << " before, " << fmt("%.1f", m.value("load_after", 0.0)) << " after; LibTorch "
     << m.value("torch", "") << ", " << m.value("intra_op_threads", 0) << " intra-op threads; BLAS "
     << m.value("blas", "") << ".\n\n";

  md << "| Measure | wick | reference | ratio / added | spread (wick, ref) | target | met |\n"
     << "| --- | --- | --- | --- | --- | --- | --- |\n";
  auto tg = targets(r);
  auto met = [&](std::size_t i) { return i < tg.size() ? (tg[i].met ? "yes" : "**no**") : ""; };
  if (r.contains("parity")) {
    const auto& p = r["parity"];
    struct Row {
      const char *side, *prefix, *label;
      int target;  // index into tg, or -1
    };
    const Row rows[] = {
        {"in_process", "",
         "parity in-process (Trainer::fit vs hand loop), samples/s (wall; ratio: median of "
         "order-balanced pairs)",
         0},
        {"in_process", "cpu_", "parity in-process, samples per CPU second", 1},
        {"processes", "", "parity processes (`wick fit` vs hand loop), samples/s (wall)", -1},
        {"processes", "cpu_", "parity processes, samples per CPU second", -1}};
    for (const auto& row : rows) {
      if (!p.contains(row.side)) continue;
      const auto& s = p[row.side];
      const std::string pre = row.prefix;
      auto k = [&](const char* name) { return pre + name; };
      md << "| " << row.label << " | "
         << fmt("%.0f", num(s, k("wick_samples_per_s").c_str(), "median")) << " | "
         << fmt("%.0f", num(s, k("hand_samples_per_s").c_str(), "median")) << " | "
         << fmt("%.3f", parity_ratio(s, pre)) << " (pairs "
         << fmt("%.3f", num(s, k("pair_ratios").c_str(), "min")) << "–"
         << fmt("%.3f", num(s, k("pair_ratios").c_str(), "max")) << ") | "
         << pct(num(s, k("wick_samples_per_s").c_str(), "spread")) << ", "
         << pct(num(s, k("hand_samples_per_s").c_str(), "spread")) << " | "
         << (row.target >= 0 ? ">= 0.98" : "") << " | "
         << (row.target >= 0 ? met(static_cast<std::size_t>(row.target)) : "") << " |\n";
    }
    if (p.contains("hand_default_malloc"))
      md << "| hand loop with glibc's malloc defaults (processes), samples/s (wall; per CPU "
            "second) | | "
         << fmt("%.0f", num(p["hand_default_malloc"], "samples_per_s", "median")) << "; "
         << fmt("%.0f", num(p["hand_default_malloc"], "cpu_samples_per_s", "median"))
         << " | | | | |\n";
    if (p.contains("callgrind") && p["callgrind"].contains("ratio"))
      md << "| parity under callgrind, instructions per step ("
         << p["callgrind"]["steps"].get<int>() << " steps; " << p["callgrind"].value("workload", "")
         << ") | " << fmt("%.0f", num(p["callgrind"], "wick_ir_per_step")) << " | "
         << fmt("%.0f", num(p["callgrind"], "hand_ir_per_step")) << " | "
         << fmt("%.5f", num(p["callgrind"], "ratio")) << " (+"
         << fmt("%.0f", num(p["callgrind"], "wick_extra_ir_per_step"))
         << " per step) | exact | | |\n";
    else if (p.contains("callgrind") && p["callgrind"].contains("skipped"))
      md << "| parity under callgrind | skipped: " << p["callgrind"]["skipped"].get<std::string>()
         << " | | | | | |\n";
    const auto& mem = p["memory"];
    md << "| peak RSS, MiB (separate processes) | "
       << fmt("%.0f", num(mem, "wick_peak_rss_mb", "median")) << " | "
       << fmt("%.0f", num(mem, "hand_peak_rss_mb", "median")) << " | "
       << fmt("%.3f", num(mem, "ratio")) << " | " << pct(num(mem, "wick_peak_rss_mb", "spread"))
       << ", " << pct(num(mem, "hand_peak_rss_mb", "spread")) << " | <= 1.10 | " << met(2)
       << " |\n";
  }
  std::size_t off = r.contains("parity") ? 3 : 0;
  if (r.contains("dispatch")) {
    const auto& d = r["dispatch"];
    const auto& last = d["rows"].back();
    md << "| dispatch, 32 no-op hooks x 5 points, us/step | "
       << fmt("%.3f", num(last, "trainer", "median")) << " | "
       << fmt("%.3f", num(last, "plain_std_function", "median")) << " (std::function) | +"
       << fmt("%.3f", num(last, "trainer_added_us_per_step")) << " | "
       << pct(num(last, "trainer", "spread")) << ", "
       << pct(num(last, "plain_std_function", "spread")) << " | <= 3 | " << met(off) << " |\n";
    md << "| point with no subscriber, ns | "
       << fmt("%.2f", num(d, "unsubscribed_point_ns", "median")) << " | | | "
       << pct(num(d, "unsubscribed_point_ns", "spread")) << " | <= 10 | " << met(off + 1) << " |\n";
    off += 2;
  }
  if (r.contains("startup")) {
    const auto& s = r["startup"];
    md << "| `wick describe`, " << s.value("plugins", 0) << " plugins ("
       << s.value("plugin_set", "") << "), s | " << fmt("%.3f", num(s, "describe_wall_s", "median"))
       << " | " << fmt("%.3f", num(s, "version_wall_s", "median")) << " (`wick --version`) | +"
       << fmt("%.3f", num(s, "plugins_and_config_s")) << " | "
       << pct(num(s, "describe_wall_s", "spread")) << ", "
       << pct(num(s, "version_wall_s", "spread")) << " | <= 0.6 | " << met(off) << " |\n";
    ++off;
  }
  if (r.contains("ddp") && r["ddp"].contains("cnn")) {
    const auto& c = r["ddp"]["cnn"];
    md << "| data-parallel CNN (`bench/ddp_cnn.toml`), samples/s, 2 ranks vs 1 (1 thread each) | "
       << fmt("%.0f", num(c, "two_ranks_samples_per_s", "median")) << " | "
       << fmt("%.0f", num(c, "one_rank_samples_per_s", "median")) << " | "
       << fmt("%.3f", num(c, "ratio", "median")) << " (rounds "
       << fmt("%.3f", num(c, "ratio", "min")) << "–" << fmt("%.3f", num(c, "ratio", "max"))
       << ") | " << pct(num(c, "two_ranks_samples_per_s", "spread")) << ", "
       << pct(num(c, "one_rank_samples_per_s", "spread")) << " | >= 1.6 | " << met(off) << " |\n";
  }

  if (r.contains("dispatch")) {
    const auto& d = r["dispatch"];
    const json cg = r.value("callgrind", json::object());
    const bool have_cg = cg.contains("ir_per_step");
    md << "\nDispatch per training step (5 points), median of rounds"
       << (have_cg ? "; instructions from callgrind" : "") << ":\n\n"
       << "| hooks | trainer us | added us | std::function us | Signals2 dummy_mutex us |"
       << (have_cg ? " trainer Ir | std::function Ir | Signals2 Ir |" : "") << "\n"
       << "| --- | --- | --- | --- | --- |" << (have_cg ? " --- | --- | --- |" : "") << "\n";
    for (std::size_t i = 0; i < d["rows"].size(); ++i) {
      const auto& row = d["rows"][i];
      md << "| " << row["hooks"].get<int>() << " | " << fmt("%.3f", num(row, "trainer", "median"))
         << " | " << fmt("%.3f", num(row, "trainer_added_us_per_step")) << " | "
         << fmt("%.3f", num(row, "plain_std_function", "median")) << " | "
         << fmt("%.3f", num(row, "bare_signals2_dummy_mutex", "median")) << " |";
      if (have_cg && i < cg["ir_per_step"].size()) {
        const auto& c = cg["ir_per_step"][i];
        md << " " << fmt("%.0f", num(c, "trainer")) << " | "
           << fmt("%.0f", num(c, "plain_std_function")) << " | "
           << fmt("%.0f", num(c, "bare_signals2_dummy_mutex")) << " |";
      }
      md << "\n";
    }
    if (have_cg)
      md << "\nPoint with no subscriber: " << fmt("%.1f", num(cg, "unsubscribed_point_ir"))
         << " instructions per emit (callgrind).\n";
    else if (cg.contains("skipped"))
      md << "\nCallgrind: skipped (" << cg["skipped"].get<std::string>() << ").\n";
  }
  if (r.contains("startup") && r["startup"].contains("per_plugin_load_ms")) {
    md << "\nPlugin load time in a fresh process (LibTorch already loaded):\n\n"
       << "| plugin | ms |\n| --- | --- |\n";
    for (const auto& p : r["startup"]["per_plugin_load_ms"])
      md << "| " << p.value("name", fs::path(p.value("path", "")).filename().string()) << " | "
         << (p.contains("ms") ? fmt("%.2f", p["ms"].get<double>()) : p.value("error", ""))
         << " |\n";
  }
  if (r.contains("ddp") && r["ddp"].contains("cnn")) {
    md << "\nData-parallel scaling (`wick fit --nproc 2` vs `wick fit`, one intra-op thread per "
          "rank, same per-rank batch of 64; medians over rounds; the independent pair is two "
          "1-rank fits at once, no communication: this machine's ceiling):\n\n"
       << "| workload | 1 rank samples/s | 2 ranks samples/s | ratio (min–max) | independent "
          "pair / 1 rank | buckets (largest, floats) | started during backward | per step "
          "compute / comm / wait, ms |\n"
       << "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for (const char* w : {"cnn", "mlp"}) {
      if (!r["ddp"].contains(w)) continue;
      const auto& c = r["ddp"][w];
      md << "| " << w << " (" << c.value("rounds", 0) << " rounds, " << c.value("limit", 0)
         << " samples) | " << fmt("%.0f", num(c, "one_rank_samples_per_s", "median")) << " | "
         << fmt("%.0f", num(c, "two_ranks_samples_per_s", "median")) << " | "
         << fmt("%.3f", num(c, "ratio", "median")) << " (" << fmt("%.3f", num(c, "ratio", "min"))
         << "–" << fmt("%.3f", num(c, "ratio", "max")) << ") | "
         << fmt("%.3f", num(c, "independent_pair_ratio", "median")) << " | ";
      if (c.contains("ddp")) {
        const auto& d = c["ddp"];
        md << fmt("%.0f", num(d, "buckets")) << " (" << fmt("%.0f", num(d, "max_bucket_floats"))
           << ") | " << fmt("%.1f", num(d, "started_during_backward_per_step")) << " | "
           << fmt("%.2f", num(d, "compute_ms", "median")) << " / "
           << fmt("%.2f", num(d, "comm_ms", "median")) << " / "
           << fmt("%.2f", num(d, "wait_ms", "median")) << " |\n";
      } else {
        md << " | | |\n";
      }
    }
  }
  if (r.contains("memory_tools")) {
    const auto& m = r["memory_tools"];
    if (m.contains("activation_checkpointing")) {
      const auto& a = m["activation_checkpointing"];
      md << "\nActivation checkpointing (" << a.value("model", "") << "; `wick fit --profile`, "
         << a.value("rounds", 0)
         << " alternated rounds; CPU tensor bytes at each phase's peak, medians):\n\n"
         << "| run | forward peak MiB | backward peak MiB | samples/s |\n| --- | --- | --- | --- "
            "|\n";
      for (const char* side : {"plain", "ckpt"})
        md << "| " << (std::string(side) == "plain" ? "plain" : "every block checkpointed") << " | "
           << fmt("%.1f", num(a[side], "forward_peak_mib", "median")) << " | "
           << fmt("%.1f", num(a[side], "backward_peak_mib", "median")) << " | "
           << fmt("%.0f", num(a[side], "samples_per_s", "median")) << " |\n";
      md << "| checkpointed / plain | " << fmt("%.3f", num(a, "forward_peak_ratio")) << " | "
         << fmt("%.3f", num(a, "backward_peak_ratio")) << " | "
         << fmt("%.3f", num(a, "samples_per_s_ratio")) << " |\n";
    }
    if (m.contains("sharding")) {
      md << "\nSharded optimizer state (Adam, `wick fit --nproc 2`, one thread per rank, rotated "
            "rounds; mlp: `bench/ddp_mlp.toml`, whose first weight holds 85% of the "
            "parameters; deep: synthetic 512 -> 8 x Linear 512 -> 10, batch 256):\n\n"
         << "| workload | run | optimizer state bytes, rank 0 / rank 1 | samples/s | / plain ddp "
            "|\n| --- | --- | --- | --- | --- |\n";
      for (const auto& [w, z] : m["sharding"].items())
        for (const char* side : {"ddp", "zero1", "zero2"}) {
          const auto& x = z[side];
          md << "| " << w << " | " << side << " | "
             << fmt("%.0f", num(x, "optimizer_state_bytes_rank0")) << " / "
             << fmt("%.0f", num(x, "optimizer_state_bytes_rank1")) << " | "
             << fmt("%.0f", num(x, "samples_per_s", "median")) << " | "
             << fmt("%.3f", num(x, "samples_per_s_ratio")) << " |\n";
        }
    }
  }
  if (r.contains("loader")) {
    const auto& l = r["loader"];
    md << "\nLoader threads (MLP 784-256-128-10, batch 64, a torch::data per-sample dataset "
          "whose get(i) takes 1 ms; "
       << l.value("samples", 0) << " samples, " << l.value("rounds", 0)
       << " alternated rounds): num_workers 0 "
       << fmt("%.0f", num(l, "workers_0_samples_per_s", "median")) << " samples/s, 2 workers "
       << fmt("%.0f", num(l, "workers_2_samples_per_s", "median")) << " samples/s, ratio "
       << fmt("%.2f", num(l, "ratio", "median")) << " (" << fmt("%.2f", num(l, "ratio", "min"))
       << "–" << fmt("%.2f", num(l, "ratio", "max")) << ").\n";
  }
  if (r.contains("metrics")) {
    const auto& x = r["metrics"];
    md << "\nMetric plugins (accuracy + f1 + confusion_matrix, MLP 784-256-128-10, validation "
          "batch 256, one thread): updates "
       << fmt("%.1f", num(x, "updates_us", "median")) << " µs against an eval step of "
       << fmt("%.1f", num(x, "eval_step_us", "median")) << " µs, a share of "
       << fmt("%.3f", num(x, "share", "median")) << " (" << fmt("%.3f", num(x, "share", "min"))
       << "–" << fmt("%.3f", num(x, "share", "max")) << ").\n";
  }
  if (r.contains("torchscript")) {
    const auto& x = r["torchscript"];
    md << "\nThe torchscript task (mlp.toml's MLP written in Python, scripted, trained from .npy "
          "files; batch 64, Adam, one thread; "
       << x.value("samples", 0) << " Fashion-MNIST samples, " << x.value("rounds", 0)
       << " alternated rounds): " << fmt("%.0f", num(x, "torchscript_samples_per_s", "median"))
       << " samples/s against the built-in C++ MLP's "
       << fmt("%.0f", num(x, "cpp_samples_per_s", "median")) << ", ratio "
       << fmt("%.3f", num(x, "ratio", "median")) << " (" << fmt("%.3f", num(x, "ratio", "min"))
       << "–" << fmt("%.3f", num(x, "ratio", "max")) << ").\n";
  }
  if (r.contains("python") && r["python"].contains("cnn")) {
    md << "\nAgainst a plain PyTorch loop (bench/python_loop.py, python3-torch "
          "1.13, fp32; one thread each, alternated processes):\n";
    for (const char* m : {"cnn", "mlp"}) {
      const auto& x = r["python"][m];
      const long epochs = x.value("epochs", 0L);
      md << "- " << x.value("config", "") << " as shipped, "
         << (epochs > 0 ? std::to_string(epochs) + " epochs"
                        : std::to_string(x.value("steps", 0L)) + " steps")
         << " of batch 64, " << x.value("rounds", 0)
         << " rounds: " << fmt("%.0f", num(x, "wick_samples_per_s", "median"))
         << " samples/s against " << fmt("%.0f", num(x, "python_samples_per_s", "median"))
         << ", ratio " << fmt("%.2f", num(x, "ratio", "median")) << " ("
         << fmt("%.2f", num(x, "ratio", "min")) << "–" << fmt("%.2f", num(x, "ratio", "max"))
         << ").\n";
    }
  }
  if (r.contains("busy") && r["busy"].contains("hogs")) {
    const auto& b = r["busy"];
    md << "\n## Busy neighbour\n\n"
       << b.value("hogs", 0) << " spinning process(es) on " << b.value("cores", 0)
       << " cores while " << b.value("config", "") << " trains " << b.value("steps", 0L)
       << " steps of batch 64 (" << b.value("rounds", 0)
       << " rounds, medians; the PyTorch loop is bench/python_loop.py on torch "
       << b.value("pytorch", "") << ", its default " << b.value("pytorch_threads", 0)
       << " thread(s)):\n\n"
       << "| run | samples/s |\n|---|---:|\n"
       << "| wick, default (threads = \"auto\") | "
       << fmt("%.0f", num(b, "wick_default_samples_per_s", "median")) << " |\n"
       << "| wick, threads = 1 | " << fmt("%.0f", num(b, "wick_threads_1_samples_per_s", "median"))
       << " |\n| wick, threads = " << b.value("cores", 0) << " | "
       << fmt("%.0f", num(b, "wick_threads_all_samples_per_s", "median"))
       << " |\n| PyTorch loop, its defaults | "
       << fmt("%.0f", num(b, "pytorch_default_samples_per_s", "median")) << " |\n\nTargets:\n\n";
    for (const auto& t : tg)
      if (t.name.rfind("busy neighbour: ", 0) == 0)
        md << "- " << t.name.substr(16) << ": " << fmt("%.2f", t.value) << " (" << t.rule
           << "): " << (t.met ? "met" : "**not met**") << "\n";
  }
  if (r.contains("peers") && !r["peers"].contains("skipped")) {
    const auto& p = r["peers"];
    md << "\n## Peers\n\nThe same data, model, optimizer (Adam), batch (64) and steps, one "
          "thread each, "
       << p.value("rounds", 0) << " rounds in alternating order; wick's LibTorch "
       << r["meta"].value("torch", "") << ", the Python peers in " << p.value("python", "")
       << ". x plain loop: samples/s against the plain loop of the same language and round "
          "(wick against the hand-written LibTorch loop, the Python trainers against the plain "
          "PyTorch loop); its shortfall is the framework's tax.\n";
    for (const char* w : {"mlp", "cnn", "transformer", "gan", "gpt"}) {
      if (!p.contains(w)) continue;
      const auto& x = p[w];
      const long steps = x.value("max_steps", 0L);
      md << "\n### " << w << " (" << x.value("epochs", 0L) << " epoch(s)"
         << (steps > 0 ? ", " + std::to_string(steps) + " steps" : std::string()) << ")\n\n"
         << "| row | samples/s median (min–max) | x plain loop | "
         << (std::string(w) == "gan" ? "final d / g loss" : "valid accuracy")
         << " | start to first step, s | peak RSS, MiB | version |\n"
         << "| --- | --- | --- | --- | --- | --- | --- |\n";
      for (const auto& row : x["rows"]) {
        std::string quality;
        if (row.contains("valid_accuracy"))
          quality = fmt("%.4f", row["valid_accuracy"].get<double>());
        else if (row.contains("final_losses"))
          quality = fmt("%.3f", row["final_losses"]["d"].get<double>()) + " / " +
                    fmt("%.3f", row["final_losses"]["g"].get<double>());
        md << "| " << row.value("row", "") << " | "
           << fmt("%.0f", num(row, "samples_per_s", "median")) << " ("
           << fmt("%.0f", num(row, "samples_per_s", "min")) << "–"
           << fmt("%.0f", num(row, "samples_per_s", "max")) << ") | "
           << (row["tax"]["samples"].empty() ? std::string("–")
                                             : fmt("%.2f", 1 - num(row, "tax", "median")))
           << " | " << quality << " | " << fmt("%.2f", num(row, "start_to_first_step_s", "median"))
           << " | " << fmt("%.0f", num(row, "peak_rss_mb", "median")) << " | "
           << row.value("version", "") << " |\n";
      }
    }
    md << "\nTargets:\n\n";
    for (const auto& t : tg)
      if (t.name.rfind("peers ", 0) == 0)
        md << "- " << t.name.substr(6) << ": " << fmt("%.3f", t.value) << " (" << t.rule
           << "): " << (t.met ? "met" : "**not met**") << "\n";
  }
  if (r.contains("restart")) {
    const auto& x = r["restart"];
    md << "\nRestart (`wick launch --nproc 2 --max-restarts 1`, the ddp MLP, a checkpoint every "
       << x.value("checkpoint_every_n_steps", 0)
       << " steps): from kill -9 of rank 1 to every "
          "rank training again "
       << fmt("%.2f", num(x, "recovery_s", "median")) << " s ("
       << fmt("%.2f", num(x, "recovery_s", "min")) << "–"
       << fmt("%.2f", num(x, "recovery_s", "max")) << " s, " << x.value("rounds", 0)
       << " rounds); steps done again after the resume: "
       << fmt("%.0f", num(x, "steps_redone", "median")) << ".\n";
  }
  if (r.contains("profiler")) {
    const auto& x = r["profiler"];
    md << "\nProfiler (`wick fit --profile`, the MLP on generated data, batch 64, one thread, "
       << x.value("samples", 0) << " samples, " << x.value("rounds", 0)
       << " alternated rounds): " << fmt("%.0f", num(x, "on_samples_per_s", "median"))
       << " samples/s profiled against " << fmt("%.0f", num(x, "off_samples_per_s", "median"))
       << ", overhead " << fmt("%.2f", 100 * num(x, "overhead", "median")) << "% ("
       << fmt("%.2f", 100 * num(x, "overhead", "min")) << "–"
       << fmt("%.2f", 100 * num(x, "overhead", "max")) << "%); the phases account for "
       << fmt("%.1f", 100 * num(x, "phases_share_of_step", "median")) << "% of the "
       << fmt("%.3f", num(x, "step_ms", "median")) << " ms step.\n";
  }
  if (!m["notes"].empty()) {
    md << "\nNotes:\n\n";
    for (const auto& n : m["notes"]) md << "- " << n.get<std::string>() << "\n";
  }
  md << "\nReproduce: `make bench` (runs `build/bin/wick_bench --out bench/results.json`).\n";
  return md.str();
}

// The sections main() runs, in its order: the names --only takes.
const char* const kSections[] = {"dispatch",     "callgrind", "startup",     "parity",  "ddp",
                                 "loader",       "metrics",   "torchscript", "restart", "profiler",
                                 "memory_tools", "python",    "busy",        "peers"};

bool is_section(const std::string& name) {
  for (const char* s : kSections)
    if (name == s) return true;
  return false;
}

int usage() {
  std::string sections;
  for (const char* s : kSections) sections += (sections.empty() ? "" : ",") + std::string(s);
  std::fprintf(stderr,
               "usage: wick_bench [--out FILE] [--smoke] [--config CFG] [--reps N] "
               "[--child-reps N] [--ddp-rounds N] [--peers-workloads mlp,cnn,transformer,gan,gpt] "
               "[--only %s]\n",
               sections.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // Child modes (run by the benchmark itself).
  if (!args.empty() && args[0] == "--hand-child") {
    if (args.size() < 4 || args[2] != "--perm-seed") return usage();
    std::vector<std::string> sets;
    bool default_malloc = false;
    for (std::size_t i = 4; i < args.size(); ++i) {
      if (args[i] == "--set" && i + 1 < args.size())
        sets.push_back(args[++i]);
      else if (args[i] == "--default-malloc")
        default_malloc = true;
      else
        return usage();
    }
    // The same memory set-up as `wick fit`, unless asked to show glibc's defaults.
    if (!default_malloc) wick::keep_freed_memory();
    return hand_child_main(args[1], sets, std::stoull(args[3]));
  }
  // Everything else measured in this process runs with the memory set-up `wick` uses, so
  // the in-process comparison is like with like.
  const bool malloc_tuned = wick::keep_freed_memory();
  if (!args.empty() && args[0] == "--parity-callgrind") {
    if (args.size() < 3) return usage();
    std::vector<std::string> sets;
    for (std::size_t i = 3; i + 1 < args.size(); i += 2)
      if (args[i] == "--set") sets.push_back(args[i + 1]);
    wick::keep_freed_memory();
    return parity_callgrind_main(args[1], sets, std::stol(args[2]));
  }
  if (!args.empty() && args[0] == "--dispatch-callgrind")
    return dispatch_callgrind_main(args.size() > 1 ? std::stol(args[1]) : 1000);
  if (!args.empty() && args[0] == "--load-plugins")
    return load_plugins_main({args.begin() + 1, args.end()});

  Settings s;
  s.wick_bin = WICK_BENCH_WICK_BIN;
  s.source_dir = WICK_BENCH_SOURCE_DIR;
  s.bench_plugin_dir = WICK_BENCH_PLUGIN_DIR;
  s.plugin_dir = WICK_BENCH_BUILTIN_PLUGIN_DIR;
  std::string out = "bench/results.json";
  std::set<std::string> only;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw std::invalid_argument(a + " needs a value");
      return args[++i];
    };
    try {
      if (a == "--out")
        out = value();
      else if (a == "--smoke")
        s.smoke = true;
      else if (a == "--config")
        s.config = value();
      else if (a == "--reps")
        s.reps = std::stoi(value());
      else if (a == "--child-reps")
        s.child_reps = std::stoi(value());
      else if (a == "--ddp-rounds")
        s.ddp_rounds = std::stoi(value());
      else if (a == "--peers-workloads") {
        std::stringstream ss(value());
        for (std::string x; std::getline(ss, x, ',');) s.peers_workloads.push_back(x);
      } else if (a == "--only") {
        std::stringstream ss(value());
        for (std::string x; std::getline(ss, x, ',');) {
          if (!is_section(x)) throw std::invalid_argument("--only: no section '" + x + "'");
          only.insert(x);
        }
      } else
        return usage();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "wick_bench: %s\n", e.what());
      return usage();
    }
  }
  if (s.smoke) {
    s.reps = 1;
    s.child_reps = 1;
  }
  auto want = [&](const char* section) {
    if (!is_section(section)) throw std::logic_error(std::string("unlisted section ") + section);
    return only.empty() || only.count(section);
  };

  char tmpl[] = "/tmp/wick_bench_XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("mkdtemp");
    return 1;
  }
  s.work_dir = tmpl;

  json r;
  auto sys = wick::system_report();
  r["meta"] = {{"date", now_utc()},
               {"smoke", s.smoke},
               {"cpu", cpu_name()},
               {"cores", std::thread::hardware_concurrency()},
               {"load_before", load_average()},
               {"torch", TORCH_VERSION},
               {"keep_freed_memory", malloc_tuned},
               {"intra_op_threads", sys.intra_op_threads},
               {"blas", sys.blas_path.empty() ? std::string("(not found)") : sys.blas_path}};
  int rc = 0;
  try {
    if (want("dispatch")) r["dispatch"] = run_dispatch(s);
    if (want("callgrind") && !s.smoke) r["callgrind"] = run_callgrind(s);
    if (want("callgrind") && s.smoke) r["callgrind"] = {{"skipped", "smoke run"}};
    if (want("startup")) r["startup"] = run_startup(s);
    if (want("parity")) {
      r["parity"] = run_parity(s);
      r["memory"] = r["parity"]["memory"];
    }
    if (want("ddp")) r["ddp"] = run_ddp(s);
    if (want("loader")) r["loader"] = run_loader(s);
    if (want("metrics")) r["metrics"] = run_metrics(s);
    if (want("torchscript")) r["torchscript"] = run_torchscript(s);
    if (want("restart")) r["restart"] = run_restart(s);
    if (want("profiler")) r["profiler"] = run_profiler(s);
    if (want("memory_tools")) r["memory_tools"] = run_memory_tools(s);
    if (want("python")) r["python"] = run_python(s);
    if (want("busy")) r["busy"] = run_busy(s);
    if (want("peers")) r["peers"] = run_peers(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wick_bench: %s\n", e.what());
    r["error"] = e.what();
    rc = 1;
  }
  r["meta"]["load_after"] = load_average();
  // --only re-measures some sections, --peers-workloads some of the peers' workloads: the others
  // stay as the run that measured them wrote them, so results.md keeps every table. Each
  // section's and workload's date goes from file to file in meta.measured and
  // meta.measured_peers, with the CPU it was measured on; a file written before those were kept
  // gives only an upper bound.
  const std::string now =
      r["meta"]["date"].get<std::string>() + " on " + r["meta"]["cpu"].get<std::string>();
  for (const auto& [k, v] : r.items())
    if (k != "meta" && k != "error") r["meta"]["measured"][k] = now;
  if (r.contains("peers"))
    for (const auto& [k, v] : r["peers"].items())
      if (v.is_object() && v.contains("rows")) r["meta"]["measured_peers"][k] = now;
  const bool some_peers = !s.peers_workloads.empty() && r.contains("peers");
  if ((!only.empty() || some_peers) && fs::exists(out)) {
    try {
      const auto old = json::parse(read_text(out));
      const std::string bound = "on or before " + old["meta"].value("date", "?");
      const auto date_in = [&](const char* table, const std::string& k,
                               const std::string& or_else) {
        const json& m = old["meta"];
        return m.contains(table) && m[table].contains(k) ? m[table][k].get<std::string>() : or_else;
      };
      // A workload of the peers measured with the whole section has the section's date.
      const std::string peers_date = date_in("measured", "peers", bound);
      const auto keep = [&](const char* table, const std::string& k,
                            std::map<std::string, std::string>& by_date) {
        const std::string d =
            date_in(table, k, std::string(table) == "measured_peers" ? peers_date : bound);
        r["meta"][table][k] = d;
        auto& names = by_date[d];
        names += (names.empty() ? "" : ", ") + k;
      };
      // Names kept, by the date they were measured on, for the notes.
      std::map<std::string, std::string> kept, kept_peers;
      for (const auto& [k, v] : old.items())
        if (k != "meta" && k != "targets" && !r.contains(k)) {
          r[k] = v;
          keep("measured", k, kept);
        }
      if (some_peers && old.contains("peers"))
        for (const auto& [k, v] : old["peers"].items())
          if (v.is_object() && v.contains("rows") && !r["peers"].contains(k)) {
            r["peers"][k] = v;
            keep("measured_peers", k, kept_peers);
          }
      for (const auto& [d, names] : kept)
        s.notes.push_back("measured by an earlier run (" + d + "), kept: " + names);
      for (const auto& [d, names] : kept_peers)
        s.notes.push_back("peers: measured by an earlier run (" + d + "), kept: " + names);
    } catch (const std::exception& e) {
      s.notes.push_back(std::string("the earlier ") + out + " is unreadable: " + e.what());
    }
  }
  r["meta"]["notes"] = s.notes;
  json tj = json::array();
  for (const auto& t : targets(r))
    tj.push_back({{"name", t.name}, {"target", t.rule}, {"value", t.value}, {"met", t.met}});
  r["targets"] = tj;

  const std::string md = markdown(r);
  std::fputs(md.c_str(), stdout);
  fs::path outp(out);
  if (outp.has_parent_path()) fs::create_directories(outp.parent_path());
  std::ofstream(outp) << r.dump(2) << "\n";
  std::ofstream(fs::path(outp).replace_extension(".md")) << md;
  std::error_code ec;
  fs::remove_all(s.work_dir, ec);
  return rc;
}
