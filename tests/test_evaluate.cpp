// Using a trained run: `wick evaluate` gives the fit's own validation numbers for the same
// weights and scikit-learn's on `wick predict`'s outputs; 2 ranks give what 1 process gives;
// predict reads .npy / .csv / .pt inputs as the task's own rows; bad input is refused with the
// file named; nothing in the run folder changes. And the host API (Trainer::evaluate/predict).
#include <torch/torch.h>

#include <cstdint>
#include <set>

#include "support.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/task.hpp"
#include "wick/tensor_files.hpp"
#include "wick/trainer.hpp"

using namespace wick::test;

namespace {

// The valid/* values of an evaluate --json file or of summary.json.
std::map<std::string, double> valid_values(const nlohmann::json& j) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : (j.contains("values") ? j["values"] : j).items())
    if (k.rfind("valid/", 0) == 0) out[k] = v.get<double>();
  return out;
}

void check_equal(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [k, v] : a) {
    INFO(k);
    REQUIRE(b.count(k) == 1);
    CHECK(b.at(k) == Approx(v).epsilon(1e-12));
  }
}

std::string synthetic_config(const fs::path& run_dir, const std::string& extra = "") {
  return "[trainer]\nepochs = 1\nbatch_size = 16\nvalid_batch_size = 24\noutput_dir = \"" +
         run_dir.string() +
         "\"\n[task]\nplugin = \"synthetic\"\nsamples = 64\nvalid_samples = 50\n"
         "[[hooks]]\nplugin = \"checkpoint\"\n[[metrics]]\nplugin = \"f1\"\n" +
         extra;
}

}  // namespace

TEST_CASE(
    "wick evaluate on the Fashion-MNIST MLP equals the fit's validation, scikit-learn's f1 and "
    "accuracy on wick predict's outputs, and 2 ranks alike") {
  need_python({"numpy", "sklearn", "torch"});
  TempDir d;
  const auto run_dir = d / "run";
  write_file(d / "mlp.toml",
             "[trainer]\nepochs = 1\nbatch_size = 64\nvalid_batch_size = 1000\nsteps_per_epoch = "
             "150\nlog_every = 0\noutput_dir = \"" +
                 run_dir.string() +
                 "\"\n[task]\nplugin = \"fashion_mnist\"\nmodel = \"mlp\"\nhidden = [64]\n"
                 "[[hooks]]\nplugin = \"checkpoint\"\nmonitor = \"valid/f1_macro\"\nmode = "
                 "\"max\"\n[[metrics]]\nplugin = \"accuracy\"\n[[metrics]]\nplugin = \"f1\"\n"
                 "name = \"f1_macro\"\naverage = \"macro\"\n");
  const std::string cfg = (d / "mlp.toml").string();
  auto fit = run_wick({"fit", cfg});
  REQUIRE(fit.exit_code == 0);
  const auto fitted = valid_values(read_json(run_dir / "summary.json"));
  REQUIRE(fitted.count("valid/f1_macro") == 1);
  const auto before = file_hashes(run_dir);

  // The fit's own last validation, from the checkpoint written at its end and from best.
  auto ev = run_wick({"evaluate", cfg, "--json", (d / "ev.json").string()});
  INFO(ev.err << ev.out);
  REQUIRE(ev.exit_code == 0);
  CHECK(ev.out.find("| valid/f1_macro | ") != std::string::npos);
  const auto evj = read_json(d / "ev.json");
  CHECK(evj["samples"] == 10000);
  CHECK(evj["split"] == "valid");
  check_equal(fitted, valid_values(evj));
  REQUIRE(run_wick({"evaluate", cfg, "--checkpoint", "best", "--json", (d / "best.json").string()})
              .exit_code == 0);
  check_equal(fitted, valid_values(read_json(d / "best.json")));

  // scikit-learn on predict's outputs, against the labels of the t10k set.
  REQUIRE(run_wick({"predict", cfg, "--split", "valid", "--output", (d / "p.npy").string()})
              .exit_code == 0);
  REQUIRE(run_wick({"predict", cfg, "--split", "valid", "--checkpoint", "ckpt-e0001-b0000000",
                    "--output", (d / "p.csv").string()})
              .exit_code == 0);
  write_file(d / "ref.py", R"py(
import gzip, json, sys
import numpy as np
from sklearn import metrics as m
d = sys.argv[1]
p = np.load(f"{d}/p.npy")
raw = gzip.decompress(open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", "rb").read())
y = np.frombuffer(raw[8:], dtype=np.uint8)
c = np.loadtxt(f"{d}/p.csv", delimiter=",", skiprows=1)
print(json.dumps({"shape": list(p.shape), "dtype": str(p.dtype),
                  "accuracy": m.accuracy_score(y, p.argmax(1)),
                  "f1_macro": m.f1_score(y, p.argmax(1), average="macro"),
                  "csv_rows_in_order": bool((c[:, 0] == np.arange(len(c))).all()),
                  "csv_max_diff": float(np.abs(c[:, 1:].astype(np.float32) - p).max())}))
)py");
  auto py = run({kPython, (d / "ref.py").string(), d.path().string()});
  INFO(py.err);
  REQUIRE(py.exit_code == 0);
  const auto sk = nlohmann::json::parse(py.out);
  CHECK(sk["shape"] == nlohmann::json::array({10000, 10}));
  CHECK(sk["dtype"] == "float32");
  CHECK(sk["csv_rows_in_order"] == true);
  CHECK(sk["csv_max_diff"].get<double>() == 0.0);  // %.9g gives a float32 back exactly
  CHECK(std::abs(evj["values"]["valid/accuracy"].get<double>() - sk["accuracy"].get<double>()) <
        1e-6);
  CHECK(std::abs(evj["values"]["valid/f1_macro"].get<double>() - sk["f1_macro"].get<double>()) <
        1e-6);

  // Two ranks, each its half of the set: the same whole-set values and the same rows as one
  // process. One thread each: LibTorch 2.x's bundled BLAS splits a product's sums by thread
  // count, so bit-equality holds between processes of equal threads.
  const std::vector<std::string> one_thread = {"--set", "trainer.threads=1"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), one_thread.begin(), one_thread.end());
    auto r = run_wick(args);
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
  };
  with({"evaluate", cfg, "--json", (d / "ev1.json").string()});
  with({"evaluate", cfg, "--nproc", "2", "--json", (d / "ev2.json").string()});
  check_equal(valid_values(read_json(d / "ev1.json")), valid_values(read_json(d / "ev2.json")));
  with({"predict", cfg, "--split", "valid", "--output", (d / "p1.npy").string()});
  with({"predict", cfg, "--nproc", "2", "--split", "valid", "--output", (d / "p2.npy").string()});
  CHECK(read_file(d / "p2.npy") == read_file(d / "p1.npy"));

  // Nothing in the run folder changed.
  CHECK(file_hashes(run_dir) == before);
}

TEST_CASE("wick predict reads .npy, .csv and .pt inputs as the task's own rows") {
  need_python({"numpy", "sklearn", "torch"});
  TempDir d;
  write_file(d / "cfg.toml", synthetic_config(d / "run"));
  const std::string cfg = (d / "cfg.toml").string();
  REQUIRE(run_wick({"fit", cfg}).exit_code == 0);
  REQUIRE(run_wick({"predict", cfg, "--split", "valid", "--output", (d / "own.npy").string()})
              .exit_code == 0);

  // The task's validation inputs, written by wick and by NumPy, PyTorch and a CSV writer.
  auto conf = wick::Config::load(cfg);
  wick::PluginFinder finder(conf.search_path());
  auto task = conf.make_task(finder);
  auto valid = std::dynamic_pointer_cast<wick::TensorDataset>(task->valid_data());
  REQUIRE(valid);
  const at::Tensor x = valid->input();
  REQUIRE(x.dim() == 2);
  wick::write_tensor_file((d / "x.npy").string(), x);
  c10::Dict<std::string, at::Tensor> dict;
  dict.insert("input", x);
  const auto pt = torch::pickle_save(c10::IValue(dict));
  write_file(d / "x.pt", std::string(pt.begin(), pt.end()));
  const auto tuple =
      torch::pickle_save(c10::IValue(c10::ivalue::Tuple::create({x, valid->target()})));
  write_file(d / "xt.pt", std::string(tuple.begin(), tuple.end()));
  write_file(d / "make.py", R"py(
import sys
import numpy as np
d = sys.argv[1]
x = np.load(f"{d}/x.npy")
np.save(f"{d}/x64.npy", x.astype(np.float64))
np.savetxt(f"{d}/x.csv", x, delimiter=",", fmt="%.9g",
           header=",".join(f"f{i}" for i in range(x.shape[1])), comments="")
np.save(f"{d}/fortran.npy", np.asfortranarray(x))
np.save(f"{d}/narrow.npy", x[:, :5])
np.save(f"{d}/text.npy", np.array(["a", "b"]))
# As torch.save writes tensors of a GPU (tagged cuda:0), which a CPU machine reads here.
import torch, torch.serialization
torch.serialization.location_tag = lambda storage: "cuda:0"
torch.save({"input": torch.from_numpy(x), "rows": torch.tensor(len(x))}, f"{d}/gpu.pt")
)py");
  auto py = run({kPython, (d / "make.py").string(), d.path().string()});
  INFO(py.err);
  REQUIRE(py.exit_code == 0);

  const std::string own = read_file(d / "own.npy");
  for (const char* in : {"x.npy", "x64.npy", "x.csv", "x.pt", "xt.pt", "gpu.pt"}) {
    INFO(in);
    const auto out = d / (std::string(in) + ".out.npy");
    auto r = run_wick({"predict", cfg, "--input", (d / in).string(), "--output", out.string()});
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(read_file(out) == own);
  }

  auto refused = [&](const std::string& in) {
    auto r = run_wick(
        {"predict", cfg, "--input", (d / in).string(), "--output", (d / "bad.npy").string()});
    CHECK(r.exit_code == 2);
    CHECK_FALSE(fs::exists(d / "bad.npy"));
    return r.err;
  };
  const std::string at = (d / "x").string();
  CHECK(refused("narrow.npy")
            .find("\nwick: " + (d / "narrow.npy").string() +
                  ": the input's samples have shape [5] but the task's inputs "
                  "have [16]; give one row per sample, shaped as the task's "
                  "inputs\n") != std::string::npos);
  CHECK(refused("fortran.npy")
            .find("fortran.npy: the array is in Fortran order; save "
                  "numpy.ascontiguousarray(a) instead") != std::string::npos);
  CHECK(refused("text.npy").find("text.npy: dtype '<U1' is not one wick reads") !=
        std::string::npos);
  CHECK(refused("missing.npy").find("missing.npy: no such file") != std::string::npos);
  write_file(d / "cells.csv", "a,b\n1,2\n3,x\n");
  CHECK(refused("cells.csv").find("cells.csv:3:3: 'x' is not a number") != std::string::npos);
  write_file(d / "short.npy", read_file(d / "x.npy").substr(0, 200));
  CHECK(refused("short.npy").find("does not match the") != std::string::npos);
  write_file(d / "zip.npz", "PK not a zip");
  CHECK(refused("zip.npz").find("zip.npz: not a .npz (zip) file; write it with numpy.savez") !=
        std::string::npos);
  write_file(d / "none.py",
             "import sys, numpy as np\n"
             "np.save(sys.argv[1] + '/none.npy', np.zeros((0, 16), np.float32))\n");
  REQUIRE(run({kPython, (d / "none.py").string(), d.path().string()}).exit_code == 0);
  CHECK(refused("none.npy").find("none.npy: the input holds no sample; give one row per sample") !=
        std::string::npos);
}

TEST_CASE("a GPU run's checkpoint is evaluated and resumed on a CPU") {
  need_python({"torch"});
  TempDir d;
  // An ema hook: its weights, in state.pt, are the ones evaluated.
  write_file(d / "cfg.toml",
             synthetic_config(d / "run", "[[hooks]]\nplugin = \"ema\"\ndecay = 0.5\n"));
  const std::string cfg = (d / "cfg.toml").string();
  // One thread throughout: both evaluations sum in the same order, whatever the machine's load.
  const std::vector<std::string> one_thread = {"--set", "trainer.threads=1"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), one_thread.begin(), one_thread.end());
    return run_wick(args);
  };
  REQUIRE(with({"fit", cfg}).exit_code == 0);
  REQUIRE(with({"evaluate", cfg, "--json", (d / "cpu.json").string()}).exit_code == 0);
  // state.pt (the hooks' states, the epoch's losses) rewritten as a GPU run's holds its tensors:
  // tagged cuda:0, which torch.load without map_location cannot read where CUDA is not in use.
  fs::path ck;  // the last of the run's checkpoints (its only one: the epoch's)
  for (const auto& e : fs::directory_iterator(d / "run" / "checkpoints"))
    if (e.path().filename().string().rfind("ckpt-", 0) == 0) ck = std::max(ck, e.path());
  REQUIRE(fs::exists(ck / "state.pt"));
  write_file(d / "to_gpu.py", R"py(
import hashlib, json, pickle, sys, torch, torch.serialization
class Pickler(pickle._Pickler):
    # Every dict as MARK ... SETITEMS, as LibTorch writes them: LibTorch 1.13 does not read
    # the SETITEM that Python's pickler writes for a dict of one entry.
    def _batch_setitems(self, items, *rest):
        items = list(items)
        if items:
            self.write(pickle.MARK)
            for k, v in items:
                self.save(k)
                self.save(v)
            self.write(pickle.SETITEMS)
class pickler_module:
    Pickler = Pickler
ck = sys.argv[1]
state = torch.load(f"{ck}/state.pt")
torch.serialization.location_tag = lambda storage: "cuda:0"
torch.save(state, f"{ck}/state.pt", pickle_module=pickler_module)
m = json.load(open(f"{ck}/manifest.json"))
b = open(f"{ck}/state.pt", "rb").read()
m["files"]["state.pt"] = {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()}
json.dump(m, open(f"{ck}/manifest.json", "w"))
)py");
  auto py = run({kPython, (d / "to_gpu.py").string(), ck.string()});
  INFO(py.err);
  REQUIRE(py.exit_code == 0);
  auto ev = with({"evaluate", cfg, "--json", (d / "gpu.json").string()});
  INFO(ev.err << ev.out);
  REQUIRE(ev.exit_code == 0);
  check_equal(valid_values(read_json(d / "cpu.json")), valid_values(read_json(d / "gpu.json")));
  auto resumed = with({"fit", cfg, "--resume", "latest", "--set", "trainer.epochs=2"});
  INFO(resumed.err << resumed.out);
  CHECK(resumed.exit_code == 0);
}

TEST_CASE("wick evaluate and predict refuse bad checkpoints and arguments, naming them") {
  TempDir d;
  const auto run_dir = d / "run";
  write_file(d / "cfg.toml", synthetic_config(run_dir));
  const std::string cfg = (d / "cfg.toml").string();

  auto none = run_wick({"evaluate", cfg});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("--checkpoint latest: no checkpoint in '" +
                      (run_dir / "checkpoints").string() + "' and no final weights '" +
                      (run_dir / "model.pt").string() + "'") != std::string::npos);
  REQUIRE(run_wick({"fit", cfg}).exit_code == 0);

  auto mismatch = run_wick({"evaluate", cfg, "--set", "task.hidden=[8]"});
  CHECK(mismatch.exit_code == 2);
  CHECK(mismatch.err.find("does not match the model of this config") != std::string::npos);
  CHECK(mismatch.err.find("0.weight: expected [8, 16] Float, found [32, 16] Float") !=
        std::string::npos);

  // Ranks started without their rendezvous.
  auto lone =
      run_wick({"evaluate", cfg}, {"WORLD_SIZE=2", "RANK=0", "MASTER_ADDR=", "MASTER_PORT="});
  CHECK(lone.exit_code == 2);
  CHECK(lone.err.find("wick: WORLD_SIZE is 2 but MASTER_ADDR / MASTER_PORT are not set; start "
                      "the ranks with wick launch (or --nproc N)") != std::string::npos);
  auto usage = [&](const std::vector<std::string>& args, const std::string& msg) {
    std::vector<std::string> all = {args[0], cfg};
    all.insert(all.end(), args.begin() + 1, args.end());
    auto r = run_wick(all);
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(msg) != std::string::npos);
  };
  usage({"evaluate", "--checkpoint", "nope"}, "--checkpoint nope: no checkpoint folder");
  usage({"evaluate", "--checkpoint", "nope"}, "or the path of a model.pt");
  usage({"evaluate", "--checkpoint", "best"},
        "a fit saves one when hooks.checkpoint.monitor is set");
  usage({"evaluate", "--split", "test"}, "--split test: give valid or train");
  usage({"predict", "--output", (d / "p.npy").string()},
        "give the samples to predict: --split valid|train or --input FILE");
  usage({"predict", "--split", "valid", "--input", "x.npy", "--output", (d / "p.npy").string()},
        "--split valid and --input x.npy: give one of them");
  usage({"predict", "--split", "valid", "--output", (d / "p.txt").string()},
        "p.txt: name a .npy or .csv file");
  usage({"predict", "--split", "valid", "--output", (d / "no" / "p.npy").string()},
        "--output " + (d / "no" / "p.npy").string() + ": no folder '" + (d / "no").string() +
            "'; create it first");

  // A damaged checkpoint: latest skips it with the reason; none left is a run error.
  const auto ckpt = run_dir / "checkpoints" / "ckpt-e0001-b0000000";
  auto bytes = read_file(ckpt / "model.pt");
  bytes[bytes.size() / 2] ^= 1;
  write_file(ckpt / "model.pt", bytes);
  const auto before = file_hashes(run_dir);
  auto bad = run_wick({"evaluate", cfg});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("wick: warning: skipping checkpoint '" + ckpt.string() +
                     "' cannot be used: model.pt does not match its sha256") != std::string::npos);
  CHECK(bad.err.find("none of the 1 checkpoints in") != std::string::npos);
  auto named = run_wick({"predict", cfg, "--checkpoint", ckpt.string(), "--split", "valid",
                         "--output", (d / "p.npy").string()});
  CHECK(named.exit_code == 1);
  CHECK_FALSE(fs::exists(d / "p.npy"));

  // Export of what it cannot export.
  auto neither = run_wick({"export", d.path().string(), "--out", (d / "m.pt").string()});
  CHECK(neither.exit_code == 2);
  CHECK(neither.err.find("' is neither a run folder (with summary.json) nor a checkpoint folder "
                         "(with manifest.json)") != std::string::npos);
  auto not_jit = run_wick({"export", run_dir.string(), "--out", (d / "m.pt").string()});
  CHECK(not_jit.exit_code == 2);
  CHECK(not_jit.err.find("the model of task 'synthetic' is not a TorchScript module") !=
        std::string::npos);
  auto summary = read_json(run_dir / "summary.json");
  summary.erase("config");
  write_file(d / "old" / "summary.json", summary.dump());
  auto old = run_wick({"export", (d / "old").string(), "--out", (d / "m.pt").string()});
  CHECK(old.exit_code == 2);
  CHECK(old.err.find("summary.json names no config (a run of an older wick, or of a host "
                     "program)") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "m.pt"));
  CHECK(file_hashes(run_dir) == before);

  // A task without validation data evaluates its training split.
  write_file(d / "novalid.toml", synthetic_config(d / "novalid", ""));
  auto text = read_file(d / "novalid.toml");
  text.replace(text.find("valid_samples = 50"), 18, "valid_samples = 0");
  write_file(d / "novalid.toml", text);
  REQUIRE(run_wick({"fit", (d / "novalid.toml").string()}).exit_code == 0);
  auto novalid = run_wick({"evaluate", (d / "novalid.toml").string()});
  CHECK(novalid.exit_code == 2);
  CHECK(novalid.err.find("the task has no validation data (its valid_data() gives none); use the "
                         "training split (--split train)") != std::string::npos);
  CHECK(run_wick({"evaluate", (d / "novalid.toml").string(), "--split", "train"}).exit_code == 0);
}

TEST_CASE(
    "a fit without a checkpoint hook keeps its final weights: torch.load reads them, and "
    "evaluate, predict and export use them, saying so") {
  need_python({"torch"});
  TempDir d;
  const auto run_dir = d / "run";
  // No checkpoint hook; an ema hook, whose weights validation used; bf16 autocast, which
  // evaluate applies as validation did.
  auto cfg_text = synthetic_config(run_dir,
                                   "[[hooks]]\nplugin = \"ema\"\ndecay = 0.5\n"
                                   "[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"bf16\"\n");
  const std::string checkpoint_hook = "[[hooks]]\nplugin = \"checkpoint\"\n";
  cfg_text.replace(cfg_text.find(checkpoint_hook), checkpoint_hook.size(), "");
  write_file(d / "cfg.toml", cfg_text);
  const std::string cfg = (d / "cfg.toml").string();
  auto fit = run_wick({"fit", cfg, "--set", "trainer.epochs=2"});
  INFO(fit.err << fit.out);
  REQUIRE(fit.exit_code == 0);
  CHECK(fit.out.find("wick: final weights (ema) in " + (run_dir / "model.pt").string()) !=
        std::string::npos);
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(run_dir)) files.insert(e.path().filename());
  CHECK(files == std::set<std::string>{"metrics.jsonl", "model.pt", "summary.json", "wick.lock"});
  const auto summary = read_json(run_dir / "summary.json");
  CHECK(summary["model_file"] == "model.pt");
  CHECK(summary["model_weights"] == "ema");

  // A dict of tensors by name, as Python's torch.load reads it with weights_only (PyTorch 2.6's
  // default): nothing in the file but tensors and plain containers.
  write_file(d / "read.py",
             "import sys, torch\n"
             "m = torch.load(sys.argv[1], weights_only=True)\n"
             "print(' '.join(sorted(m)), sum(int(v.numel()) for v in m.values()))\n");
  auto py = run({kPython, (d / "read.py").string(), (run_dir / "model.pt").string()});
  INFO(py.err);
  REQUIRE(py.exit_code == 0);
  // synthetic's MLP 16-32-4: 16*32 + 32 + 32*4 + 4 = 676 parameters.
  CHECK(py.out == "0.bias 0.weight 2.bias 2.weight 676\n");

  // evaluate takes them (there is no checkpoint) and says which; the values are the fit's last
  // validation, which ran on the same (EMA) weights.
  auto ev = run_wick({"evaluate", cfg, "--json", (d / "ev.json").string()});
  INFO(ev.err << ev.out);
  REQUIRE(ev.exit_code == 0);
  CHECK(ev.err.find("wick: using the final weights (ema) of " + (run_dir / "model.pt").string()) !=
        std::string::npos);
  const auto ev_json = read_json(d / "ev.json");
  CHECK(ev_json["weights"] == "ema");
  check_equal(valid_values(summary), valid_values(ev_json));
  // They are not the trained weights, which only a checkpoint keeps beside EMA's.
  auto trained = run_wick({"evaluate", cfg, "--weights", "trained"});
  CHECK(trained.exit_code == 2);
  CHECK(trained.err.find("--weights trained: the final weights " + (run_dir / "model.pt").string() +
                         " are the ema ones, and the run has no checkpoint") != std::string::npos);
  // The same file by its path.
  auto pr = run_wick({"predict", cfg, "--checkpoint", (run_dir / "model.pt").string(), "--split",
                      "valid", "--output", (d / "p.npy").string()});
  INFO(pr.err);
  CHECK(pr.exit_code == 0);
  CHECK(pr.err.find("wick: using the final weights (ema) of " + (run_dir / "model.pt").string()) !=
        std::string::npos);

  // Without the key, nothing is written; and nothing is left to evaluate.
  auto off = run_wick({"fit", cfg, "--set", "trainer.save_model=false", "--set",
                       "trainer.output_dir=\"" + (d / "off").string() + "\""});
  REQUIRE(off.exit_code == 0);
  CHECK_FALSE(fs::exists(d / "off" / "model.pt"));
  CHECK_FALSE(read_json(d / "off" / "summary.json").contains("model_file"));
  auto none = run_wick({"evaluate", cfg, "--checkpoint", "final", "--set",
                        "trainer.output_dir=\"" + (d / "off").string() + "\""});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("--checkpoint final: no '" + (d / "off" / "model.pt").string() +
                      "'; a fit writes it when it ends (trainer.save_model = true)") !=
        std::string::npos);

  // A model.pt that wick did not write is refused, naming the file.
  write_file(run_dir / "model.pt", "not a pickle");
  auto bad = run_wick({"evaluate", cfg, "--checkpoint", "final"});
  INFO(bad.err);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("'" + (run_dir / "model.pt").string() + "'") != std::string::npos);
  CHECK(bad.err.find("(not a model.pt that wick wrote)") != std::string::npos);
}

TEST_CASE("Trainer::evaluate equals validate, and predict gives every row in sample order") {
  TempDir d;
  auto conf = wick::Config::parse(synthetic_config(d / "run"), (d / "cfg.toml").string(), {});
  wick::PluginFinder finder({WICK_PLUGIN_DIR});
  auto t = wick::make_trainer(conf, finder);
  const auto v = t->validate();
  const auto e = t->evaluate(wick::Split::valid);
  REQUIRE(v.values.size() == 3);  // valid/loss, the task's valid/accuracy, valid/f1
  CHECK(e.samples == 50);
  REQUIRE(e.values.size() == v.values.size());
  for (std::size_t i = 0; i < v.values.size(); ++i) {
    CHECK(e.values[i].first == v.values[i].first);
    CHECK(e.values[i].second == v.values[i].second);
  }
  const auto tr = t->evaluate(wick::Split::train);
  CHECK(tr.samples == 64);
  CHECK(tr.values.at(0).first == "train/loss");

  auto valid = std::dynamic_pointer_cast<wick::TensorDataset>(t->task().valid_data());
  REQUIRE(valid);
  torch::NoGradGuard ng;
  t->model().eval();
  const auto expected = t->task().forward(t->context(), {valid->input(), valid->target()});
  std::vector<std::int64_t> calls;
  const auto rows = t->predict(wick::Split::valid, [&](std::int64_t done, std::int64_t total) {
    CHECK(total == 50);
    calls.push_back(done);
  });
  CHECK(calls == std::vector<std::int64_t>{24, 48, 50});  // valid_batch_size 24
  CHECK(torch::allclose(rows, expected, 1e-6, 1e-6));
  const auto three = t->predict(valid->input().slice(0, 0, 3));
  CHECK(torch::allclose(three, expected.slice(0, 0, 3), 1e-6, 1e-6));

  // A trainer connected for evaluation only evaluates as before and refuses to fit, before
  // it touches the run folder (a fit would mark the evaluated run failed).
  auto only = wick::make_trainer(conf, finder);
  only->connect_for_evaluation();
  const auto e2 = only->evaluate(wick::Split::valid);
  CHECK(e2.samples == 50);
  CHECK_THROWS_WITH(only->fit(), Catch::Contains("fit() on a trainer connected for evaluation "
                                                 "only (connect_for_evaluation)"));
  CHECK_THROWS_WITH(only->validate(), Catch::Contains("cannot connect its hooks for a fit"));
  CHECK_FALSE(fs::exists(d / "run" / "summary.json"));
}
