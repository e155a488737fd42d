// A model made in Python and trained by wick from TOML alone (the torchscript task), as a
// PyTorch user would bring one: scripted with Debian's python3-torch, data saved with
// torch.save / numpy.savez / numpy.save / a CSV writer, the result exported and loaded back
// in Python.
#include <cstdint>

#include <sys/stat.h>

#include "support.hpp"

using namespace wick::test;

namespace {

RunResult python(const TempDir& d, const std::string& script, std::vector<std::string> args = {}) {
  write_file(d / "script.py", script);
  std::vector<std::string> argv = {kPython, (d / "script.py").string(), d.path().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {"PYTHONPATH=" + std::string(WICK_SOURCE_DIR) + "/samples/torchscript"});
}

double json_number(const std::string& out, const std::string& key) {
  return nlohmann::json::parse(out)[key].get<double>();
}

}  // namespace

TEST_CASE(
    "a transformer scripted in Python trains from TOML alone to the accuracy of Python's own "
    "loop, and its export gives in Python the accuracy wick logged") {
  need_python({"numpy", "torch"});
  TempDir d;
  const std::string samples = std::string(WICK_SOURCE_DIR) + "/samples/torchscript";
  auto made = run({kPython, samples + "/make.py", d.path().string()});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  // The sample's own config, its data beside it.
  write_file(d / "ts.toml", read_file(samples + "/torchscript.toml"));
  const std::string cfg = (d / "ts.toml").string();
  const std::string out_dir = "trainer.output_dir=\"" + (d / "run").string() + "\"";
  auto fit = run_wick({"fit", cfg, "--set", out_dir, "--set", "hooks.progress.mode=\"plain\""});
  INFO(fit.err << fit.out);
  REQUIRE(fit.exit_code == 0);
  const auto summary = read_json(d / "run" / "summary.json");
  const double wick_acc = summary["valid/accuracy"].get<double>();

  auto py = run({kPython, samples + "/train.py", d.path().string(), "12"});
  INFO(py.err);
  REQUIRE(py.exit_code == 0);
  const double python_acc = json_number(py.out, "valid_accuracy");
  INFO("wick " << wick_acc << ", Python " << python_acc);
  CHECK(python_acc > 0.85);  // the task is learnt in these epochs
  CHECK(wick_acc > python_acc - 0.05);

  auto exported = run_wick({"export", (d / "run").string(), "--out", (d / "trained.pt").string()});
  INFO(exported.err << exported.out);
  REQUIRE(exported.exit_code == 0);
  auto loaded = run(
      {kPython, samples + "/accuracy.py", (d / "trained.pt").string(), (d / "valid.pt").string()});
  INFO(loaded.err);
  REQUIRE(loaded.exit_code == 0);
  CHECK(json_number(loaded.out, "accuracy") == Approx(wick_acc).margin(1e-6));
  // And in C++: the export is a TorchScript file the task loads (and probes) again.
  auto reloaded = run_wick({"check", cfg, "--set", out_dir, "--set",
                            "task.model=\"" + (d / "trained.pt").string() + "\""});
  INFO(reloaded.err);
  CHECK(reloaded.exit_code == 0);

  // predict reads the same .pt as the task (its "input").
  auto pred = run_wick({"predict", cfg, "--set", out_dir, "--input", (d / "valid.pt").string(),
                        "--output", (d / "p.npy").string()});
  INFO(pred.err);
  CHECK(pred.exit_code == 0);
  CHECK(pred.out.find("wrote 1000 predictions of shape [3]") != std::string::npos);
  // The tokens are integers: float rows are refused, not truncated.
  auto floats = python(d,
                       "import sys, numpy as np\n"
                       "np.save(sys.argv[1] + '/floats.npy', np.full((4, 12), 1.5, np.float32))\n");
  REQUIRE(floats.exit_code == 0);
  auto refused = run_wick({"predict", cfg, "--set", out_dir, "--input", (d / "floats.npy").string(),
                           "--output", (d / "f.npy").string()});
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("floats.npy: the input holds floating point values but the task's "
                         "inputs are Long; give integer values") != std::string::npos);
}

namespace {

// A linear model over 4 features and 3 classes, with a loss method of its own, and one data
// set written in every format the task reads.
const char* const kMakeSmall = R"py(
import os, sys
import numpy as np
import torch
d = sys.argv[1]

class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
    def forward(self, x):
        return self.fc(x)
    @torch.jit.export
    def loss(self, pred, target):
        return torch.nn.functional.cross_entropy(pred, target)

class NoLoss(torch.nn.Module):
    def forward(self, x):
        return x

torch.manual_seed(0)
torch.jit.script(Linear()).save(f"{d}/linear.pt")
torch.jit.script(NoLoss()).save(f"{d}/noloss.pt")
frozen = Linear()
for p in frozen.parameters():
    p.requires_grad_(False)
torch.jit.script(frozen).save(f"{d}/frozen.pt")
g = torch.Generator().manual_seed(1)
x = torch.randn(96, 4, generator=g)
y = x[:, :3].argmax(1)
torch.save({"input": x, "target": y, "extra": y}, f"{d}/dict.pt")
torch.save((x, y), f"{d}/tuple.pt")
np.savez(f"{d}/plain.npz", input=x.numpy(), target=y.numpy())
np.savez_compressed(f"{d}/packed.npz", input=x.numpy().astype(np.float64), target=y.numpy())
os.makedirs(f"{d}/npy")
np.save(f"{d}/npy/input.npy", x.numpy())
np.save(f"{d}/npy/target.npy", y.numpy())
rows = ["a,b,c,d,label"] + [",".join(f"{v:.9g}" for v in r) + f",{int(l)}" for r, l in zip(x.tolist(), y.tolist())]
open(f"{d}/data.csv", "w").write("\n".join(rows) + "\n")
torch.save({"input": x[:, :3], "target": y}, f"{d}/narrow.pt")
torch.save({"input": x, "target": y + 2}, f"{d}/labels.pt")
torch.save({"input": x, "target": y[:50]}, f"{d}/short.pt")
torch.save({"input": x, "target": y.float() + 0.5}, f"{d}/halves.pt")
torch.save({"input": x[:0], "target": y[:0]}, f"{d}/empty.pt")
torch.save({"input": x, "target": y.unsqueeze(1)}, f"{d}/column.pt")
)py";

std::string small_config(const TempDir& d, const std::string& out, const std::string& task) {
  return "[trainer]\nepochs = 2\nbatch_size = 16\nshuffle = true\noutput_dir = \"" +
         (d / out).string() + "\"\n[task]\nplugin = \"torchscript\"\nmodel = \"linear.pt\"\n" +
         task + "\n[[hooks]]\nplugin = \"checkpoint\"\n";
}

}  // namespace

TEST_CASE(
    "the torchscript task trains alike from .pt, .npz, .npy and .csv data, with a named loss or "
    "the module's own, and resumes exactly") {
  need_python({"numpy", "torch"});
  TempDir d;
  auto made = python(d, kMakeSmall);
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  std::map<std::string, std::string> prints;
  const std::vector<std::pair<std::string, std::string>> sets = {
      {"dict", "train = \"dict.pt\""},
      {"tuple", "train = \"tuple.pt\""},
      {"plain", "train = \"plain.npz\""},
      {"packed", "train = \"packed.npz\""},  // float64 inputs, deflated
      {"npy", "train = \"npy\""},
      {"csv", "train = \"data.csv\"\ntarget_key = \"label\""},
      {"module", "train = \"dict.pt\"\nloss = \"module\""}};
  for (const auto& [name, task] : sets) {
    INFO(name);
    write_file(d / (name + ".toml"), small_config(d, name, task));
    auto r = run_wick({"fit", (d / (name + ".toml")).string()});
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    prints[name] = read_json(d / name / "summary.json")["model_fingerprint"];
  }
  // The same samples in the same order: the same trained weights, whatever the file.
  for (const auto& [name, fp] : prints) {
    INFO(name);
    CHECK(fp == prints["dict"]);
  }
  // One epoch, then a resume into the second: the weights of the uninterrupted run.
  write_file(d / "resumed.toml", small_config(d, "resumed", "train = \"dict.pt\""));
  const std::string resumed = (d / "resumed.toml").string();
  REQUIRE(run_wick({"fit", resumed, "--set", "trainer.epochs=1"}).exit_code == 0);
  auto again = run_wick({"fit", resumed, "--resume", "latest"});
  INFO(again.err << again.out);
  REQUIRE(again.exit_code == 0);
  CHECK(read_json(d / "resumed" / "summary.json")["model_fingerprint"] == prints["dict"]);
}

TEST_CASE("every built-in hook and metric works with the torchscript task, and 2 ranks too") {
  need_python({"numpy", "torch"});
  TempDir d;
  auto made = python(d, kMakeSmall);
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  const std::string hooks =
      "train = \"dict.pt\"\nvalid = \"tuple.pt\"\n"
      "[[hooks]]\nplugin = \"grad_accum\"\nsteps = 2\n"
      "[[hooks]]\nplugin = \"mixed_precision\"\n"
      "[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 1.0\n"
      "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosine\"\n"
      "[[hooks]]\nplugin = \"ema\"\ndecay = 0.9\n"
      "[[hooks]]\nplugin = \"early_stopping\"\n"
      "[[hooks]]\nplugin = \"progress\"\nmode = \"plain\"\n"
      "[[hooks]]\nplugin = \"metrics_log\"\n"
      "[[metrics]]\nplugin = \"f1\"\n[[metrics]]\nplugin = \"auroc\"\n";
  write_file(d / "all.toml", small_config(d, "all", hooks));
  auto all = run_wick({"fit", (d / "all.toml").string()});
  INFO(all.err << all.out);
  REQUIRE(all.exit_code == 0);
  const auto s = read_json(d / "all" / "summary.json");
  CHECK(s["optimizer_steps"] == 6);  // 2 epochs of 6 batches, 2 per step
  CHECK(s.contains("valid/auroc"));
  CHECK(fs::exists(d / "all" / "metrics.csv"));
  // Data-parallel: 2 ranks of 8 samples per batch train as 1 process of 16.
  write_file(d / "one.toml", small_config(d, "one",
                                          "train = \"dict.pt\"\nvalid = \"tuple.pt\"\n"
                                          "[[hooks]]\nplugin = \"ddp\"\n"));
  auto one = run_wick({"fit", (d / "one.toml").string()});
  INFO(one.err << one.out);
  REQUIRE(one.exit_code == 0);
  auto two =
      run_wick({"fit", (d / "one.toml").string(), "--nproc", "2", "--set", "trainer.batch_size=8",
                "--set", "trainer.output_dir=\"" + (d / "two").string() + "\""});
  INFO(two.err << two.out);
  REQUIRE(two.exit_code == 0);
  auto no_ema = run_wick(
      {"export", (d / "one").string(), "--weights", "ema", "--out", (d / "x.pt").string()});
  CHECK(no_ema.exit_code == 2);
  CHECK(no_ema.err.find("--weights ema: " + (d / "one" / "checkpoints").string()) !=
        std::string::npos);
  CHECK(no_ema.err.find("holds no weights a hook keeps for evaluation (no hook of the run, such "
                        "as [[hooks]] plugin = \"ema\", offered any); use --weights trained") !=
        std::string::npos);
  const auto a = read_json(d / "one" / "summary.json"), b = read_json(d / "two" / "summary.json");
  CHECK(b["optimizer_steps"] == a["optimizer_steps"]);
  CHECK(b["valid/loss"].get<double>() == Approx(a["valid/loss"].get<double>()).epsilon(1e-4));
  // With an ema hook, validation ran on the EMA weights, and export takes them by default.
  write_file(d / "ema.toml", small_config(d, "ema",
                                          "train = \"dict.pt\"\nvalid = \"tuple.pt\"\n"
                                          "[[hooks]]\nplugin = \"ema\"\ndecay = 0.9\n"));
  REQUIRE(run_wick({"fit", (d / "ema.toml").string()}).exit_code == 0);
  auto ema = run_wick({"export", (d / "ema").string(), "--out", (d / "ema.pt").string()});
  INFO(ema.err << ema.out);
  REQUIRE(ema.exit_code == 0);
  CHECK(ema.out.find("exported the ema weights of " + (d / "ema" / "checkpoints").string()) !=
        std::string::npos);
  auto trained = run_wick({"export", (d / "ema").string(), "--weights", "trained", "--out",
                           (d / "trained.pt").string()});
  REQUIRE(trained.exit_code == 0);
  const std::string samples = std::string(WICK_SOURCE_DIR) + "/samples/torchscript";
  auto acc = [&](const std::string& model) {
    auto r =
        run({kPython, samples + "/accuracy.py", (d / model).string(), (d / "dict.pt").string()});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return json_number(r.out, "accuracy");
  };
  CHECK(acc("ema.pt") ==
        Approx(read_json(d / "ema" / "summary.json")["valid/accuracy"].get<double>()).margin(1e-6));
  CHECK(read_file(d / "ema.pt") != read_file(d / "trained.pt"));
  // Nothing the run keeps is overwritten: its final weights, or a checkpoint's files.
  const auto model_before = read_file(d / "ema" / "model.pt");
  auto onto_final =
      run_wick({"export", (d / "ema").string(), "--out", (d / "ema" / "model.pt").string()});
  CHECK(onto_final.exit_code == 2);
  CHECK(onto_final.err.find("is the run's own model.pt; write the export elsewhere") !=
        std::string::npos);
  CHECK(read_file(d / "ema" / "model.pt") == model_before);
  auto into_checkpoints = run_wick(
      {"export", (d / "ema").string(), "--out", (d / "ema" / "checkpoints" / "x.pt").string()});
  CHECK(into_checkpoints.exit_code == 2);
  CHECK(into_checkpoints.err.find("is inside the run's checkpoints folder") != std::string::npos);
  // evaluate takes the weights validation used too: the summary's numbers.
  auto ev = run_wick({"evaluate", (d / "ema.toml").string(), "--json", (d / "ev.json").string()});
  INFO(ev.err << ev.out);
  REQUIRE(ev.exit_code == 0);
  CHECK(read_json(d / "ev.json")["weights"] == "ema");
  CHECK(read_json(d / "ev.json")["values"]["valid/accuracy"].get<double>() ==
        Approx(read_json(d / "ema" / "summary.json")["valid/accuracy"].get<double>()).margin(1e-6));

  // A third party's weight average (tests/plugins/weight_mean.cpp, SDK headers only) does
  // what ema does: validation, the run's default export and --weights by its word.
  write_file(d / "mean.toml",
             small_config(d, "mean",
                          "train = \"dict.pt\"\nvalid = \"tuple.pt\"\n"
                          "[[hooks]]\nplugin = \"weight_mean\"\n[plugins]\npath = [\"" +
                              std::string(WICK_TEST_PLUGIN_DIR) + "\"]\n"));
  auto mean_fit = run_wick({"fit", (d / "mean.toml").string()});
  INFO(mean_fit.err << mean_fit.out);
  REQUIRE(mean_fit.exit_code == 0);
  auto mean = run_wick({"export", (d / "mean").string(), "--out", (d / "mean.pt").string()});
  INFO(mean.err << mean.out);
  REQUIRE(mean.exit_code == 0);
  CHECK(mean.out.find("exported the polyak weights of " + (d / "mean" / "checkpoints").string()) !=
        std::string::npos);
  CHECK(
      acc("mean.pt") ==
      Approx(read_json(d / "mean" / "summary.json")["valid/accuracy"].get<double>()).margin(1e-6));
  // Asked by its word: the same weights (the same file name: TorchScript archives name
  // their folder after it).
  fs::create_directories(d / "by_word");
  auto by_word = run_wick({"export", (d / "mean").string(), "--weights", "polyak", "--out",
                           (d / "by_word" / "mean.pt").string()});
  REQUIRE(by_word.exit_code == 0);
  CHECK(read_file(d / "by_word" / "mean.pt") == read_file(d / "mean.pt"));
  auto wrong_word = run_wick(
      {"export", (d / "mean").string(), "--weights", "ema", "--out", (d / "x.pt").string()});
  CHECK(wrong_word.exit_code == 2);
  CHECK(wrong_word.err.find("holds the polyak weights of a hook, not ema; use --weights polyak "
                            "or --weights auto") != std::string::npos);

  // Without a checkpoint hook the fit keeps its final weights (EMA's, which validation used),
  // and export takes them from the run folder, saying so.
  const auto final_dir = d / "final";
  REQUIRE(run_wick({"fit", (d / "ema.toml").string(), "--set", "hooks.checkpoint.enabled=false",
                    "--set", "trainer.output_dir=\"" + final_dir.string() + "\""})
              .exit_code == 0);
  CHECK_FALSE(fs::exists(final_dir / "checkpoints"));
  auto fin = run_wick({"export", final_dir.string(), "--out", (d / "final.pt").string()});
  INFO(fin.err << fin.out);
  REQUIRE(fin.exit_code == 0);
  CHECK(fin.out.find("wick: exported the final weights (ema) of " +
                     (final_dir / "model.pt").string()) != std::string::npos);
  CHECK(acc("final.pt") ==
        Approx(read_json(final_dir / "summary.json")["valid/accuracy"].get<double>()).margin(1e-6));
  // Those are not the trained weights, which only a checkpoint keeps beside them.
  auto fin_trained = run_wick({"export", final_dir.string(), "--weights", "trained", "--out",
                               (d / "final_trained.pt").string()});
  CHECK(fin_trained.exit_code == 2);
  CHECK(fin_trained.err.find(
            "--weights trained: the final weights " + (final_dir / "model.pt").string() +
            " are the ema ones, and the run has no checkpoint") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "final_trained.pt"));
  // Neither: the message names the run folder given, and no option export lacks.
  fs::remove(final_dir / "model.pt");
  auto none = run_wick({"export", final_dir.string(), "--out", (d / "none.pt").string()});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("'" + final_dir.string() + "': no checkpoint in '" +
                      (final_dir / "checkpoints").string() + "' and no final weights") !=
        std::string::npos);
  CHECK(none.err.find("or give a checkpoint folder") != std::string::npos);
  CHECK(none.err.find("--checkpoint") == std::string::npos);
}

TEST_CASE("swa recomputes a scripted or traced model's batch norms as PyTorch's update_bn does") {
  need_python({"torch"});
  TempDir d;
  // Two batch norms, one with a momentum (a constant of the scripted code) and one without
  // (a cumulative mean); 50 samples, so the last batch is short. Float64, to compare closely.
  const std::string net = R"py(
import sys, json, torch
d = sys.argv[1]
torch.set_default_dtype(torch.float64)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.l2 = torch.nn.Linear(16, 3)
        self.bn2 = torch.nn.BatchNorm1d(3, momentum=None)
    def forward(self, x):
        return self.bn2(self.l2(torch.relu(self.bn(self.l1(x)))))
)py";
  auto made = python(d, net + R"py(
torch.manual_seed(0)
net = Net()
torch.jit.script(net).save(f"{d}/bn.pt")
# Traced, the momenta are inlined in the graph (no constant to read): wick finds them.
torch.jit.trace(net, torch.randn(4, 8), check_trace=False).save(f"{d}/traced.pt")
g = torch.Generator().manual_seed(1)
x = torch.randn(50, 8, generator=g) * 3 + 1
torch.save({"input": x, "target": torch.randint(0, 3, (50,), generator=g)}, f"{d}/train.pt")
)py");
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  for (const std::string model : {"bn", "traced"}) {
    INFO(model);
    write_file(d / "cfg.toml",
               "[trainer]\nepochs = 3\nbatch_size = 16\nshuffle = false\nthreads = 1\n"
               "output_dir = \"" +
                   (d / model).string() + "\"\n[task]\nplugin = \"torchscript\"\nmodel = \"" +
                   model +
                   ".pt\"\ntrain = \"train.pt\"\n[optimizer]\nname = \"sgd\"\nlr = 0.1\n"
                   "[[hooks]]\nplugin = \"swa\"\nstart_epoch = 1\n");
    auto r = run_wick({"fit", (d / "cfg.toml").string()});
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("batch-norm statistics recomputed over 50 training samples") !=
          std::string::npos);
    // The reference: the averaged weights wick saved, statistics reset, one pass in training
    // mode with a cumulative mean, as torch.optim.swa_utils.update_bn makes them.
    auto ref = python(d, net + R"py(
saved = torch.load(f"{d}/{sys.argv[2]}/model.pt")
m = Net()
m.load_state_dict(saved)
x = torch.load(f"{d}/train.pt")["input"]
for bn in (m.bn, m.bn2):
    bn.reset_running_stats()
    bn.momentum = None
m.train()
with torch.no_grad():
    for i in range(0, 50, 16):
        m(x[i:i + 16])
diff = max((saved[k] - getattr(m, k.split(".")[0]).get_buffer(k.split(".")[1])).abs().max().item()
           for k in saved if "running" in k)
print(json.dumps({"diff": diff}))
)py",
                      {model});
    INFO(ref.err << ref.out);
    REQUIRE(ref.exit_code == 0);
    CHECK(json_number(ref.out, "diff") < 1e-12);  // the trained statistics were 0.3 off
  }
}

TEST_CASE("the torchscript task refuses bad models and data with the file and the fix") {
  need_python({"numpy", "torch"});
  TempDir d;
  auto made = python(d, kMakeSmall);
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  write_file(d / "not_a_model.pt", "hello");
  auto check = [&](const std::string& task, const std::string& model = "linear.pt") {
    auto text = small_config(d, "run", task);
    text.replace(text.find("linear.pt"), 9, model);
    write_file(d / "cfg.toml", text);
    auto r = run_wick({"check", (d / "cfg.toml").string()});
    INFO(r.err << r.out);
    CHECK(r.exit_code == 2);
    return r.err;
  };
  auto has = [](const std::string& text, const std::string& part) {
    INFO(text);
    CHECK(text.find(part) != std::string::npos);
  };
  has(check("train = \"dict.pt\"", "not_a_model.pt"),
      "task.model '" + (d / "not_a_model.pt").string() + "' is not a TorchScript file");
  has(check("train = \"dict.pt\"\ninput_key = \"inputs\""),
      (d / "dict.pt").string() + ": no tensor 'inputs'; it holds 'input', 'target', 'extra'");
  const auto narrow = check("train = \"narrow.pt\"");
  has(narrow, "the TorchScript model '" + (d / "linear.pt").string() +
                  "' failed on an input of [2, 3] Float: RuntimeError: mat1 and mat2 shapes "
                  "cannot be multiplied (2x3 and 4x3)");
  has(narrow, "return self.fc(x)");  // where, in the Python source
  has(check("train = \"labels.pt\""),
      "labels out of range for cross_entropy: the target holds 2 .. 4 but the model scores 3 "
      "classes (0 .. 2)");
  has(check("train = \"short.pt\""), "short.pt: the input has 96 rows and the target 50");
  has(check("train = \"halves.pt\""),
      "halves.pt: task.loss \"cross_entropy\" needs class indices, but the target holds "
      "fractional values");
  has(check("train = \"dict.pt\"\nloss = \"module\"", "noloss.pt"),
      "has no loss(prediction, target) method");
  // Every parameter frozen in Python: nothing would train (`wick check` says so, as fit does).
  has(check("train = \"dict.pt\"", "frozen.pt"),
      "the task's model has no trainable parameter (2 parameters, none with requires_grad on)");
  // The validation file is probed as the training file is.
  has(check("train = \"dict.pt\"\nvalid = \"labels.pt\""),
      (d / "labels.pt").string() + ": labels out of range for cross_entropy");
  has(check("train = \"empty.pt\""), (d / "empty.pt").string() + ": it holds no samples");
  has(check("train = \"dict.pt\"\nloss = \"mse\""),
      "task.loss \"mse\" compares the prediction with the target value by value, but the model "
      "gives [2, 3] Float for targets of [2] Float in " +
          (d / "dict.pt").string());
  // A column of labels [N, 1] is one class per sample.
  write_file(d / "column.toml", small_config(d, "run", "train = \"column.pt\""));
  CHECK(run_wick({"check", (d / "column.toml").string()}).exit_code == 0);
  write_file(d / "hex.csv", "a,b,c,d,label\n1,2,3,4,0\n1,0x5,3,4,1\n");
  has(check("train = \"hex.csv\"\ntarget_key = \"label\""),
      (d / "hex.csv").string() + ":3:3: '0x5' is not a number");
  write_file(d / "twice.csv", "a,b,c,label,label\n1,2,3,0,0\n");
  has(check("train = \"twice.csv\"\ntarget_key = \"label\""),
      (d / "twice.csv").string() + ":1: the header names column 'label' twice (columns 4 and 5)");
  write_file(d / "bad.csv", "a,b,c,d,label\n1,2,3,4,0\n1,2,x3,4,1\n");
  has(check("train = \"bad.csv\"\ntarget_key = \"label\""),
      (d / "bad.csv").string() + ":3:5: 'x3' is not a number");
  // A byte order mark before the header (Excel's "CSV UTF-8") is not part of a column's name.
  write_file(d / "bom.csv", "\xEF\xBB\xBFlabel,a,b,c,d\n0,1,2,3,4\n1,1,2,3,4\n");
  write_file(d / "bom.toml", small_config(d, "run", "train = \"bom.csv\"\ntarget_key = \"label\""));
  CHECK(run_wick({"check", (d / "bom.toml").string()}).exit_code == 0);
  has(check("train = \"data.csv\""),
      "no column 'target' in the header row ('a', 'b', 'c', 'd', 'label'); set target_key");
  CHECK_FALSE(fs::exists(d / "run"));  // check writes nothing
}

TEST_CASE("a .npy folder larger than the process's memory limit trains: it is memory-mapped") {
  need_python({"numpy", "torch"});
  TempDir d;
  // 1 GiB of inputs (1 M samples of 256 float32 features), a sparse file of zeros (no disk),
  // under a 768 MiB limit on the data segment (heap and private writable mappings; one thread,
  // so that BLAS's buffers stay small): reading it whole would not fit.
  write_file(d / "make_big.py", R"py(
import os, sys
import numpy as np
import torch
d, rows, width = sys.argv[1], 1024 * 1024, 256
torch.jit.script(torch.nn.Linear(width, 3)).save(f"{d}/linear.pt")
os.makedirs(f"{d}/big")
for name, dtype, shape in (("input", "<f4", (rows, width)), ("target", "<i8", (rows,))):
    with open(f"{d}/big/{name}.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": dtype, "fortran_order": False, "shape": shape})
        f.truncate(f.tell() + rows * np.dtype(dtype).itemsize * (shape[1] if len(shape) > 1 else 1))
)py");
  auto big = run({kPython, (d / "make_big.py").string(), d.path().string()});
  INFO(big.err);
  REQUIRE(big.exit_code == 0);
  const std::int64_t limit = 768LL << 20;
  CHECK(static_cast<std::int64_t>(fs::file_size(d / "big" / "input.npy")) > limit);
  write_file(d / "big.toml",
             "[trainer]\nepochs = 1\nbatch_size = 64\nsteps_per_epoch = 20\noutput_dir = \"" +
                 (d / "run").string() +
                 "\"\n[task]\nplugin = \"torchscript\"\nmodel = \"linear.pt\"\ntrain = "
                 "\"big\"\n");
  auto r = run({"/usr/bin/prlimit", "--data=" + std::to_string(limit), "--", WICK_BIN, "fit",
                (d / "big.toml").string()},
               {"OMP_NUM_THREADS=1"});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(read_json(d / "run" / "summary.json")["optimizer_steps"] == 20);
}
