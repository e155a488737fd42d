// The peers section: wick beside the trainers a user would pick instead, in one run, on the
// same data, models, optimizer, batch and steps, one thread each, rounds in alternating order:
//   wick as shipped, and wick fp32 (no autocast, channels_last or fused Adam: the arithmetic
//   of the loops below), wick_hand_loop (a hand-written LibTorch loop, hand_loop.cpp), and the
//   Python peers of bench/peers/ in their own environment (scripts/install-peers.sh): a plain
//   PyTorch 2.x loop, PyTorch Lightning (progress bar and logger as a user leaves them, and
//   off), the Hugging Face Trainer, skorch (the MLP only);
// on the Fashion-MNIST MLP and CNN, a small transformer made in Python (samples/torchscript,
// trained by wick's torchscript task), the DCGAN (samples/gan) and the GPT sample's small
// decoder (samples/gpt/gpt.toml on the bytes of the GPL; the peers build the same model with
// bench/peers/gpt2.py; no hand-written loop). Without the Python environment the section is
// skipped with a note.
#include <torch/version.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common.hpp"

namespace wick::bench {

namespace fs = std::filesystem;

namespace {

struct Workload {
  std::string name;
  long epochs = 1;     // whole epochs, unless
  long max_steps = 0;  // a cap on optimizer steps (each row stops at the same step)
};

struct Row {
  std::string name;
  enum Kind { wick_shipped, wick_fp32, hand, python } kind;
  std::string script;  // python: the peer in bench/peers/
  std::vector<std::string> extra;
  bool cpp() const { return kind != python; }
};

std::vector<Row> rows_for(const std::string& workload) {
  std::vector<Row> rows = {
      {"wick (as shipped)", Row::wick_shipped, "", {}},
      {"wick fp32", Row::wick_fp32, "", {}},
      {"LibTorch hand-written loop", Row::hand, "", {}},
      {"PyTorch plain loop", Row::python, "plain.py", {}},
      {"Lightning (progress bar, logger)", Row::python, "lightning_peer.py", {"--progress", "on"}},
      {"Lightning (no bar, no logger)", Row::python, "lightning_peer.py", {"--progress", "off"}}};
  // The GAN ships in fp32: its fp32 row would be the shipped one again.
  if (workload == "gan") rows.erase(rows.begin() + 1);
  if (workload != "gan")
    rows.push_back({"HF Trainer", Row::python, "hf_peer.py", {"--progress", "off"}});
  if (workload == "mlp") rows.push_back({"skorch", Row::python, "skorch_peer.py", {}});
  if (workload == "gpt") rows.erase(rows.begin() + 2);  // wick_hand_loop has no GPT
  return rows;
}

struct Measure {
  double samples_per_s = 0, accuracy = -1, d_loss = 0, g_loss = 0, first_step_s = -1;
  double rss_mb = 0;
  std::string version;
};

// The shipped config of a workload, and what makes it the fp32 row.
std::string shipped_config(const Settings& s, const std::string& w, const fs::path& data) {
  if (w == "transformer") return (data / "torchscript.toml").string();
  const fs::path src(s.source_dir);
  if (w == "gpt") return (src / "samples/gpt/gpt.toml").string();
  return (w == "gan" ? src / "samples/gan/gan.toml" : src / "samples/fashion_mnist" / (w + ".toml"))
      .string();
}

// Whether a line of a config, comments aside, begins with `start` (a hook named in a comment
// is not enabled).
bool has_line(const std::string& text, const std::string& start) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto b = line.find_first_not_of(" \t");
    if (b != std::string::npos && line.compare(b, start.size(), start) == 0) return true;
  }
  return false;
}

Measure run_wick(const Settings& s, const Workload& w, bool fp32, const fs::path& data,
                 const fs::path& out) {
  const std::string cfg = shipped_config(s, w.name, data);
  std::vector<std::string> argv = {s.wick_bin, "fit", cfg};
  std::vector<std::string> sets = {"trainer.threads=1",
                                   "trainer.epochs=" + std::to_string(w.epochs),
                                   "trainer.output_dir=\"" + out.string() + "\""};
  if (w.max_steps > 0) sets.push_back("trainer.max_steps=" + std::to_string(w.max_steps));
  if (w.name == "gpt")  // the byte files run_peers made, at the peers' batch
    sets.insert(sets.end(), {"task.data=\"" + (data / "gpt/train.bin").string() + "\"",
                             "task.valid_data=\"" + (data / "gpt/valid.bin").string() + "\"",
                             "trainer.batch_size=64"});
  if (fp32) {
    const std::string text = read_text(cfg);
    for (const char* hook :
         {"mixed_precision", "channels_last", "lr_schedule", "grad_accum", "grad_clip"})
      if (has_line(text, "plugin = \"" + std::string(hook) + "\""))
        sets.push_back("hooks." + std::string(hook) + ".enabled=false");
    if (has_line(text, "fused = true")) sets.push_back("optimizer.fused=false");
  }
  for (const auto& x : sets) argv.insert(argv.end(), {"--set", x});
  const auto r = run_child(argv, {"OMP_NUM_THREADS=1"});
  if (r.exit_code != 0) throw std::runtime_error("peers: wick fit " + cfg + ": " + r.err);
  const auto j = json::parse(read_text(out / "summary.json"));
  Measure m;
  m.samples_per_s = j.value("train_samples_per_s", 0.0);
  m.accuracy = j.value("valid/accuracy", -1.0);
  // The GAN's last logged losses (it has no validation).
  std::istringstream records(read_text(out / "metrics.jsonl"));
  for (std::string line; std::getline(records, line);) {
    const auto rec = json::parse(line);
    m.d_loss = rec.value("train/d_loss", m.d_loss);
    m.g_loss = rec.value("train/g_loss", m.g_loss);
  }
  m.first_step_s = j.value("start_to_first_step_s", -1.0);
  m.rss_mb = r.max_rss_mb;
  return m;
}

Measure from_line(const ChildResult& r, const std::string& what) {
  if (r.exit_code != 0) throw std::runtime_error("peers: " + what + ": " + r.err);
  // The last line that opens an object: the result, whose values may hold objects too.
  auto start = r.out.rfind("\n{");
  start = start == std::string::npos ? r.out.find('{') : start + 1;
  if (start == std::string::npos) throw std::runtime_error("peers: " + what + " printed no result");
  const auto j = json::parse(r.out.substr(start, r.out.find('\n', start) - start));
  Measure m;
  m.samples_per_s = j.value("samples_per_s", 0.0);
  if (j.contains("valid_accuracy") && j["valid_accuracy"].is_number())
    m.accuracy = j["valid_accuracy"].get<double>();
  if (j.contains("d_loss") && j["d_loss"].is_number()) m.d_loss = j["d_loss"].get<double>();
  if (j.contains("g_loss") && j["g_loss"].is_number()) m.g_loss = j["g_loss"].get<double>();
  m.first_step_s = j.value("time_to_first_step_s", -1.0);
  m.rss_mb = r.max_rss_mb;
  m.version = j.value("framework", "") + " " + j.value("version", "");
  return m;
}

std::vector<std::string> common_args(const Workload& w) {
  std::vector<std::string> a = {"--workload",   w.name, "--epochs",  std::to_string(w.epochs),
                                "--batch-size", "64",   "--threads", "1"};
  if (w.max_steps > 0) a.insert(a.end(), {"--max-steps", std::to_string(w.max_steps)});
  return a;
}

}  // namespace

json run_peers(Settings& s) {
  // The peers run PyTorch 2.11, whose TorchScript files LibTorch 1.13 cannot read; the rows
  // compare like with like only against wick's 2.x build.
  if (TORCH_VERSION_MAJOR < 2) {
    s.notes.push_back("peers: skipped, this wick_bench is built against LibTorch " +
                      std::string(TORCH_VERSION) +
                      "; the peers compare the 2.x build (`make bench-peers`)");
    return {{"skipped", "LibTorch " + std::string(TORCH_VERSION) + " build"}};
  }
  // The Python environment the peers run in (scripts/install-peers.sh), if installed.
  const auto printed = run_child({s.source_dir + "/scripts/install-peers.sh", "--print"});
  const std::string python = printed.out.substr(0, printed.out.find('\n'));
  if (printed.exit_code != 0 || python.empty() || !fs::exists(python)) {
    s.notes.push_back(
        "peers: skipped, no Python environment for the peers (scripts/install-peers.sh; `make "
        "bench-peers` installs it)");
    return {{"skipped", "no Python environment (scripts/install-peers.sh)"}};
  }
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    s.notes.push_back("peers: skipped, no Fashion-MNIST data (dataset-fashion-mnist)");
    return {{"skipped", "no Fashion-MNIST data"}};
  }
  const fs::path dir = fs::path(s.work_dir) / "peers";
  const fs::path data = dir / "transformer";
  fs::create_directories(data);
  // The transformer and its data as a Python user makes them; wick trains them from TOML.
  const auto made =
      run_child({python, s.source_dir + "/samples/torchscript/make.py", data.string()});
  if (made.exit_code != 0) throw std::runtime_error("peers: make.py: " + made.err);
  fs::copy_file(fs::path(s.source_dir) / "samples/torchscript/torchscript.toml",
                data / "torchscript.toml", fs::copy_options::overwrite_existing);
  // The GPT sample's byte files, as its README makes them.
  const auto tokens =
      run_child({python, s.source_dir + "/samples/gpt/tokenize.py",
                 "/usr/share/common-licenses/GPL-3", "--out", (data / "gpt").string()});
  if (tokens.exit_code != 0) throw std::runtime_error("peers: tokenize.py: " + tokens.err);

  // Whole epochs where they take seconds; a cap on steps where an epoch would take minutes in
  // the slowest peer (each row stops at the same step, so accuracies compare).
  std::vector<Workload> workloads = {
      {"mlp", 1, 0}, {"cnn", 1, 300}, {"transformer", 6, 0}, {"gan", 1, 200}, {"gpt", 4, 0}};
  int rounds = 3;
  if (s.smoke) {
    rounds = 1;
    workloads = {
        {"mlp", 1, 20}, {"cnn", 1, 5}, {"transformer", 1, 5}, {"gan", 1, 3}, {"gpt", 1, 5}};
  }
  if (!s.peers_workloads.empty())
    workloads.erase(std::remove_if(workloads.begin(), workloads.end(),
                                   [&](const Workload& w) {
                                     return std::find(s.peers_workloads.begin(),
                                                      s.peers_workloads.end(),
                                                      w.name) == s.peers_workloads.end();
                                   }),
                    workloads.end());
  json out = {{"rounds", rounds}, {"python", python}, {"threads", 1}, {"batch_size", 64}};
  for (const auto& w : workloads) {
    const auto rows = rows_for(w.name);
    std::vector<std::vector<Measure>> got(rows.size());
    for (int round = 0; round < rounds; ++round) {
      // Alternate the order: the machine's state drifts over a run.
      std::vector<std::size_t> order(rows.size());
      for (std::size_t i = 0; i < rows.size(); ++i)
        order[i] = round % 2 == 0 ? i : rows.size() - 1 - i;
      for (const auto i : order) {
        const auto& row = rows[i];
        const fs::path run = dir / (w.name + "_" + std::to_string(i) + "_" + std::to_string(round));
        Measure m;
        if (row.kind == Row::wick_shipped || row.kind == Row::wick_fp32) {
          m = run_wick(s, w, row.kind == Row::wick_fp32, data, run);
        } else if (row.kind == Row::hand) {
          auto argv = common_args(w);
          argv.insert(argv.begin(),
                      (fs::path(s.wick_bin).parent_path() / "wick_hand_loop").string());
          argv.insert(argv.end(), {"--data", data.string()});
          m = from_line(run_child(argv, {"OMP_NUM_THREADS=1"}), "wick_hand_loop");
        } else {
          auto argv = common_args(w);
          argv.insert(argv.begin(), {python, s.source_dir + "/bench/peers/" + row.script});
          argv.insert(argv.end(), row.extra.begin(), row.extra.end());
          m = from_line(run_child(argv, {"OMP_NUM_THREADS=1"}), row.script);
        }
        got[i].push_back(m);
      }
    }
    // The framework's tax: its samples/s against the plain loop of its own language, round by
    // round (wick against the hand-written LibTorch loop, the Python trainers against
    // plain.py).
    auto index_of = [&](Row::Kind k) {
      for (std::size_t i = 0; i < rows.size(); ++i)
        if (rows[i].kind == k) return i;
      return rows.size();
    };
    const auto hand = index_of(Row::hand), plain = index_of(Row::python);
    json jrows = json::array();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::vector<double> rate, first, rss, tax;
      for (int k = 0; k < rounds; ++k) {
        const auto& m = got[i][static_cast<std::size_t>(k)];
        rate.push_back(m.samples_per_s);
        first.push_back(m.first_step_s);
        rss.push_back(m.rss_mb);
        const auto base = rows[i].cpp() ? hand : plain;
        if (base < rows.size())  // no hand-written loop for every workload
          tax.push_back(1.0 -
                        m.samples_per_s / got[base][static_cast<std::size_t>(k)].samples_per_s);
      }
      const auto& last = got[i].back();
      json jr = {{"row", rows[i].name},
                 {"language", rows[i].cpp() ? "C++" : "Python"},
                 {"samples_per_s", make_stats(rate).to_json()},
                 {"start_to_first_step_s", make_stats(first).to_json()},
                 {"peak_rss_mb", make_stats(rss).to_json()},
                 {"tax", make_stats(tax).to_json()},
                 {"version", last.version}};
      if (last.accuracy >= 0) jr["valid_accuracy"] = last.accuracy;
      if (w.name == "gan") jr["final_losses"] = {{"d", last.d_loss}, {"g", last.g_loss}};
      jrows.push_back(jr);
    }
    out[w.name] = {{"epochs", w.epochs}, {"max_steps", w.max_steps}, {"rows", jrows}};
  }
  return out;
}

}  // namespace wick::bench
