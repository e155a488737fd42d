// The built-in metric plugins: each against values computed by hand on a small example split
// into two batches (the state must add up), against scikit-learn on random predictions, and
// through `wick fit`, where the whole-set value differs from a mean of per-batch values and
// two data-parallel ranks give what one process gives.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>

#include "support.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"
#include "wick/metric.hpp"
#include "wick/trainer.hpp"

using namespace wick::test;

namespace {

// The [[metrics]] instances of `toml`, built as `wick fit` builds them.
std::vector<wick::MetricEntry> metrics_of(const std::string& toml) {
  auto cfg = wick::Config::parse(toml, "metrics.toml", {});
  wick::PluginFinder finder({WICK_PLUGIN_DIR});
  return cfg.make_metrics(finder);
}

// One metric's value after the batches (pred, target), in order.
double value_of(const std::string& toml,
                const std::vector<std::pair<at::Tensor, at::Tensor>>& batches) {
  auto ms = metrics_of("[[metrics]]\n" + toml);
  REQUIRE(ms.size() == 1);
  auto& m = *ms[0].metric;
  m.reset();
  for (const auto& [p, t] : batches) m.update(p, t);
  const auto v = m.compute();
  REQUIRE(v.size() == 1);
  CHECK(v[0].first.empty());
  return v[0].second;
}

// Scores whose argmax is `pred` (one-hot), for class targets.
at::Tensor one_hot_scores(const std::vector<std::int64_t>& pred, std::int64_t classes) {
  return torch::one_hot(torch::tensor(pred), classes).to(torch::kFloat);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const wick::ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

}  // namespace

TEST_CASE("classification metrics equal their hand-computed values, over two batches") {
  // 7 samples, 3 classes. Confusion (rows true, columns predicted): [1 1 0; 0 2 0; 1 0 2].
  // TP = [1 2 2], predicted = [2 3 2], true = [2 2 3].
  const std::vector<std::int64_t> truth = {0, 0, 1, 1, 2, 2, 2}, pred = {0, 1, 1, 1, 2, 0, 2};
  const auto scores = one_hot_scores(pred, 3), target = torch::tensor(truth);
  const std::vector<std::pair<at::Tensor, at::Tensor>> batches = {
      {scores.slice(0, 0, 4), target.slice(0, 0, 4)}, {scores.slice(0, 4), target.slice(0, 4)}};
  auto v = [&](const std::string& t) { return value_of(t, batches); };
  CHECK(v("plugin = \"accuracy\"") == Approx(5.0 / 7).epsilon(1e-12));
  // precision per class 1/2, 2/3, 1; recall 1/2, 1, 2/3; f1 = 2TP/(2TP+FP+FN) 1/2, 4/5, 4/5.
  CHECK(v("plugin = \"precision\"") == Approx((0.5 + 2.0 / 3 + 1) / 3).epsilon(1e-12));
  CHECK(v("plugin = \"recall\"") == Approx((0.5 + 1 + 2.0 / 3) / 3).epsilon(1e-12));
  CHECK(v("plugin = \"f1\"") == Approx((0.5 + 0.8 + 0.8) / 3).epsilon(1e-12));
  CHECK(v("plugin = \"f1\"\naverage = \"weighted\"") ==
        Approx((0.5 * 2 + 0.8 * 2 + 0.8 * 3) / 7).epsilon(1e-12));
  CHECK(v("plugin = \"f1\"\naverage = \"micro\"") == Approx(5.0 / 7).epsilon(1e-12));
  CHECK(v("plugin = \"precision\"\naverage = \"weighted\"") ==
        Approx((0.5 * 2 + 2.0 / 3 * 2 + 1.0 * 3) / 7).epsilon(1e-12));
  // A fourth class scored but never true nor predicted is left out of the macro mean.
  const auto scores4 = one_hot_scores(pred, 4);
  CHECK(value_of("plugin = \"f1\"", {{scores4, target}}) == Approx(0.7).epsilon(1e-12));

  // top-k: the target among the k highest scores.
  const auto s =
      torch::tensor({{0.5, 0.3, 0.2}, {0.1, 0.2, 0.7}, {0.3, 0.6, 0.1}, {0.2, 0.3, 0.5}});
  const auto t = torch::tensor({2, 1, 1, 0});  // ranks of the target: 3rd, 2nd, 1st, 3rd
  CHECK(value_of("plugin = \"top_k_accuracy\"\nk = 2", {{s, t}}) == Approx(0.5));
  CHECK(value_of("plugin = \"top_k_accuracy\"\nk = 3", {{s, t}}) == Approx(1.0));
  CHECK(value_of("plugin = \"top_k_accuracy\"\nk = 1", {{s, t}}) == Approx(0.25));
  // Ties rank the lower class first, as argmax does: class 1 ties with class 0 above it (out
  // of the top 1), class 0 with class 1 (in), class 2 with both (out of the top 2).
  const auto tied = torch::tensor({{1.0, 1.0, 0.0}, {1.0, 1.0, 0.0}, {1.0, 1.0, 1.0}});
  const auto tt = torch::tensor({1, 0, 2});
  CHECK(value_of("plugin = \"top_k_accuracy\"\nk = 1", {{tied, tt}}) == Approx(1.0 / 3));
  CHECK(value_of("plugin = \"accuracy\"", {{tied, tt}}) == Approx(1.0 / 3));
  CHECK(value_of("plugin = \"top_k_accuracy\"\nk = 2", {{tied, tt}}) == Approx(2.0 / 3));
  CHECK(value_of("plugin = \"top_k_accuracy\"\nk = 3", {{tied, tt}}) == Approx(1.0));
  // NaN ranks above every number, as argmax has it: a diverged model's all-NaN rows are not
  // all hits (class 2 is third of three NaNs; class 0 is behind a NaN).
  const double nan = std::nan("");
  const auto nans = torch::tensor({{nan, nan, nan}, {1.0, nan, 0.0}});
  CHECK(value_of("plugin = \"top_k_accuracy\"\nk = 2", {{nans, torch::tensor({2, 0})}}) ==
        Approx(0.5));
  CHECK(value_of("plugin = \"accuracy\"", {{nans, torch::tensor({0, 1})}}) == Approx(1.0));
  // A binary logit per sample: positive when > 0.
  CHECK(value_of("plugin = \"accuracy\"", {{torch::tensor({-1.0, 2.0, 0.5, -3.0}),
                                            torch::tensor({0, 1, 0, 0})}}) == Approx(0.75));

  // AUROC, binary: positives score 0.35 and 0.8, negatives 0.1 and 0.4; 3 of the 4
  // (positive, negative) pairs are ordered right.
  CHECK(value_of("plugin = \"auroc\"", {{torch::tensor({0.1, 0.4}), torch::tensor({0, 0})},
                                        {torch::tensor({0.35, 0.8}), torch::tensor({1, 1})}}) ==
        Approx(0.75));
  // A positive and a negative of one score count one half: (0.5 + 1 + 1 + 1) / 4.
  CHECK(value_of("plugin = \"auroc\"", {{torch::tensor({0.5, 0.5, 0.2, 0.9}),
                                         torch::tensor({1, 0, 0, 1})}}) == Approx(0.875));
  // Three classes, one against the rest on probabilities: class 0 and class 2 are ranked
  // perfectly (1); class 1's positives score 0.5 and 0.2, its negatives 0.2 and 0.3:
  // (1 + 1 + 0.5 + 0) / 4 = 0.625. The macro mean: (1 + 0.625 + 1) / 3.
  const auto probs = torch::tensor(
      {{0.7, 0.2, 0.1}, {0.2, 0.5, 0.3}, {0.1, 0.3, 0.6}, {0.3, 0.2, 0.5}}, torch::kDouble);
  const auto y = torch::tensor({0, 1, 2, 1});
  CHECK(value_of("plugin = \"auroc\"",
                 {{probs.slice(0, 0, 1), y.slice(0, 0, 1)}, {probs.slice(0, 1), y.slice(0, 1)}}) ==
        Approx(2.625 / 3).epsilon(1e-12));
  // One class only: no value, and the reason.
  auto one_class = metrics_of("[[metrics]]\nplugin = \"auroc\"\n");
  one_class[0].metric->update(torch::tensor({0.1, 0.7}), torch::tensor({1, 1}));
  auto changed = metrics_of("[[metrics]]\nplugin = \"auroc\"\n");
  changed[0].metric->update(torch::zeros({2, 3}), torch::tensor({0, 1}));
  CHECK(message_of([&] {
          changed[0].metric->update(torch::zeros({2, 4}), torch::tensor({0, 1}));
        }) == "the prediction scores 4 classes where earlier batches scored 3");
  CHECK_THROWS_WITH(one_class[0].metric->compute(),
                    "AUROC needs samples of two classes, and the split's targets are all 1; "
                    "validate on data with both positive and negative samples");
}

TEST_CASE("regression metrics equal their hand-computed values, over two batches") {
  // errors 0, -1, 1, -2: |e| sums to 4, e² to 6; the target's mean is 3, SS_tot = 14.
  const auto p = torch::tensor({1.0, 2.0, 3.0, 4.0}), t = torch::tensor({1.0, 3.0, 2.0, 6.0});
  const std::vector<std::pair<at::Tensor, at::Tensor>> batches = {
      {p.slice(0, 0, 1), t.slice(0, 0, 1)}, {p.slice(0, 1), t.slice(0, 1)}};
  CHECK(value_of("plugin = \"mae\"", batches) == Approx(1.0).epsilon(1e-12));
  CHECK(value_of("plugin = \"mse\"", batches) == Approx(1.5).epsilon(1e-12));
  CHECK(value_of("plugin = \"rmse\"", batches) == Approx(std::sqrt(1.5)).epsilon(1e-12));
  CHECK(value_of("plugin = \"r2\"", batches) == Approx(1.0 - 6.0 / 14).epsilon(1e-12));
  // [N, 1] predictions for [N] targets; two outputs are averaged uniformly.
  CHECK(value_of("plugin = \"mae\"", {{p.unsqueeze(1), t}}) == Approx(1.0));
  const auto p2 = torch::stack({p, t}, 1), t2 = torch::stack({t, t}, 1);  // r2 1 - 6/14 and 1
  CHECK(value_of("plugin = \"r2\"", {{p2, t2}}) == Approx((1.0 - 6.0 / 14 + 1.0) / 2));
}

TEST_CASE("a metric that does not fit the prediction says what it found and the fix") {
  const auto scores = torch::zeros({4, 10}), classes = torch::tensor({1, 2, 3, 4});
  auto update = [&](const std::string& toml, const at::Tensor& p, const at::Tensor& t) {
    return message_of([&] { metrics_of("[[metrics]]\n" + toml)[0].metric->update(p, t); });
  };
  CHECK(update("plugin = \"r2\"", scores, classes) ==
        "needs a prediction shaped like the target; got prediction [4, 10] Float and target [4] "
        "Long (class scores: use accuracy, f1, precision or recall)");
  CHECK(update("plugin = \"top_k_accuracy\"\nk = 20", scores, classes) ==
        "k = 20 is above the 10 classes the prediction scores; set k to at most 10");
  CHECK(update("plugin = \"f1\"", scores, torch::tensor({0.5, 1.0, 2.0, 3.0})) ==
        "needs integer class targets [N] (or 0/1 ones for a single score per sample); got "
        "prediction [4, 10] Float and target [4] Float (a regression target: use mae, mse, rmse "
        "or r2)");
  // A single score per sample (bce_with_logits' binary logit) takes 0/1 floating targets, as
  // the integer classes they are, [N] or [N, 1]; other values are refused.
  const auto logit = torch::tensor({-1.0, 2.0, 0.5, -3.0}).unsqueeze(1);
  for (const auto& t :
       {torch::tensor({0.0, 1.0, 0.0, 0.0}), torch::tensor({0.0, 1.0, 0.0, 0.0}).unsqueeze(1)})
    CHECK(value_of("plugin = \"accuracy\"", {{logit, t}}) == Approx(0.75));
  CHECK(value_of("plugin = \"accuracy\"", {{logit, torch::tensor({0, 1, 0, 0})}}) == Approx(0.75));
  CHECK(update("plugin = \"auroc\"", logit, torch::tensor({0.0, 1.0, 0.5, 0.0})) ==
        "needs 0/1 targets for a single score per sample (a binary logit); got prediction [4, 1] "
        "Float and target [4] Float (a regression target: use mae, mse, rmse or r2)");
  CHECK(update("plugin = \"accuracy\"", scores, torch::tensor({1, 2, 3, 12})) ==
        "target class 12 is outside the 10 classes the prediction scores; got prediction [4, "
        "10] Float and target [4] Long");
  // Parameters are checked like every plugin's, with the place.
  auto bad = message_of([] { metrics_of("[[metrics]]\nplugin = \"f1\"\naverage = \"marco\"\n"); });
  CHECK(bad.find("'marco' is not one of \"macro\", \"micro\", \"weighted\" for 'average' in "
                 "[metrics.f1]; did you mean \"macro\"?") != std::string::npos);
  auto twice = message_of(
      [] { metrics_of("[[metrics]]\nplugin = \"f1\"\n[[metrics]]\nplugin = \"f1\"\n"); });
  CHECK(twice.find("a second [[metrics]] instance named 'f1' (the first is at ") !=
        std::string::npos);
  // In a fit, the first validation batch stops it: exit 2, the metric named.
  TempDir d;
  write_file(d / "cfg.toml", "[trainer]\nepochs = 1\noutput_dir = \"" + (d / "run").string() +
                                 "\"\n[task]\nplugin = \"synthetic\"\nsamples = 32\n"
                                 "valid_samples = 16\n[[metrics]]\nplugin = \"r2\"\n");
  auto fit = run_wick({"fit", (d / "cfg.toml").string()});
  CHECK(fit.exit_code == 2);
  CHECK(fit.err ==
        "wick: metric 'r2' (plugin 'r2') on a validation batch: needs a prediction shaped like "
        "the target; got prediction [16, 4] Float and target [16] Long (class scores: use "
        "accuracy, f1, precision or recall)\n");
  CHECK(read_json(d / "run" / "summary.json")["status"] == "failed");
  // wick check finds it first, on two validation samples.
  auto check = run_wick({"check", (d / "cfg.toml").string()});
  CHECK(check.exit_code == 2);
  CHECK_THAT(check.err, Catch::Contains("metric 'r2' (plugin 'r2') on a validation batch: needs a "
                                        "prediction shaped like the target; got prediction [2, 4] "
                                        "Float and target [2] Long"));
  // A metric's files are named after it: "Curves" would write over wick plot's curves.png (on a
  // file system that ignores case), "metrics" over metrics_log's metrics.csv.
  write_file(d / "cfg.toml",
             "[task]\nplugin = \"synthetic\"\nvalid_samples = 16\n[[metrics]]\n"
             "plugin = \"confusion_matrix\"\nname = \"Curves\"\n");
  auto named = run_wick({"check", (d / "cfg.toml").string()});
  CHECK(named.exit_code == 2);
  CHECK_THAT(named.err, Catch::Contains("a metric named 'Curves' (plugin 'confusion_matrix') "
                                        "would write its files over the run folder's own "
                                        "curves.* ("));
  // Nor may one be named loss: valid/loss is the loss's, which the summary and monitors read.
  write_file(d / "cfg.toml",
             "[task]\nplugin = \"synthetic\"\nvalid_samples = 16\n[[metrics]]\n"
             "plugin = \"accuracy\"\nname = \"loss\"\n");
  auto loss = run_wick({"check", (d / "cfg.toml").string()});
  CHECK(loss.exit_code == 2);
  CHECK_THAT(loss.err, Catch::Contains("a metric named 'loss' (plugin 'accuracy') would replace "
                                       "valid/loss"));
  // `wick plugins` lists them as metrics, with their parameters.
  auto listed = run_wick({"plugins"});
  CHECK(listed.out.find("f1 1.0.0 (metric, SDK " + std::to_string(WICK_API_MAJOR) + "." +
                        std::to_string(WICK_API_MINOR) + ")") != std::string::npos);
  auto hook = message_of([] { metrics_of("[[metrics]]\nplugin = \"synthetic\"\n"); });
  CHECK(hook.find("plugin 'synthetic' is a task plugin; use it as [task] plugin = \"synthetic\"") !=
        std::string::npos);
}

TEST_CASE("the metrics equal scikit-learn's on the same random predictions") {
  need_python({"numpy", "sklearn"});
  torch::manual_seed(7);
  const std::int64_t n = 997, classes = 6;
  const auto logits = torch::randn({n, classes}, torch::kDouble) * 2;
  // Skewed targets, correlated with the scores, so that averages differ.
  const auto target = torch::where(torch::rand({n}) < 0.6, logits.argmax(1),
                                   torch::randint(0, classes, {n}, torch::kLong));
  const auto y = torch::randn({n, 2}, torch::kDouble) * 3 + 1;
  const auto y_hat = y + torch::randn({n, 2}, torch::kDouble);
  // Uneven batches.
  auto batches_of = [&](const at::Tensor& p, const at::Tensor& t) {
    std::vector<std::pair<at::Tensor, at::Tensor>> b;
    for (std::int64_t i = 0; i < n; i += 128)
      b.push_back({p.slice(0, i, i + 128), t.slice(0, i, i + 128)});
    return b;
  };
  const auto cls = batches_of(logits, target), reg = batches_of(y_hat, y);

  TempDir d;
  auto dump = [&](const std::string& name, const at::Tensor& t) {
    const auto c = t.contiguous().to(torch::kDouble);
    std::string text;
    const auto rows = c.size(0), cols = c.dim() == 1 ? 1 : c.size(1);
    const auto flat = c.reshape({-1});
    auto a = flat.accessor<double, 1>();
    char buf[64];
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < cols; ++j) {
        std::snprintf(buf, sizeof buf, "%s%.17g", j ? "," : "", a[i * cols + j]);
        text += buf;
      }
      text += "\n";
    }
    write_file(d / (name + ".csv"), text);
  };
  dump("logits", logits);
  dump("target", target);
  dump("y", y);
  dump("y_hat", y_hat);
  // Probabilities as a bf16 model gives them: rows that sum to 1 only within bf16's rounding.
  const auto probs16 = torch::softmax(logits / 3, 1).to(torch::kBFloat16);
  dump("probs16", probs16);
  write_file(d / "ref.py", R"py(
import sys, numpy as np
from sklearn import metrics as m
d = sys.argv[1]
load = lambda n: np.loadtxt(f"{d}/{n}.csv", delimiter=",", ndmin=2)
logits, target, y, y_hat = load("logits"), load("target")[:, 0].astype(int), load("y"), load("y_hat")
probs16 = load("probs16")
pred = logits.argmax(1)
softmax = lambda z: np.exp(z) / np.exp(z).sum(1, keepdims=True)
sigmoid = lambda z: 1 / (1 + np.exp(-z))
out = {
  "accuracy": m.accuracy_score(target, pred),
  "top3": m.top_k_accuracy_score(target, logits, k=3, labels=range(logits.shape[1])),
  "mae": m.mean_absolute_error(y, y_hat), "mse": m.mean_squared_error(y, y_hat),
  "rmse": np.mean(np.sqrt(m.mean_squared_error(y, y_hat, multioutput="raw_values"))),
  "r2": m.r2_score(y, y_hat),
  # class 0's logit, rounded to halves so that there are ties, against "class 0 or not"
  "auroc_binary": m.roc_auc_score((target == 0).astype(int), np.round(logits[:, 0] * 2) / 2),
  "auroc_ovr": m.roc_auc_score(target, softmax(logits), multi_class="ovr", average="macro"),
  # logits that all lie in [0, 1], and probabilities, as given
  "auroc_unit_logits": m.roc_auc_score(target, softmax(sigmoid(logits)), multi_class="ovr"),
  "auroc_probabilities": m.roc_auc_score(target, softmax(logits / 3), multi_class="ovr"),
  # scikit-learn refuses rows that do not sum to 1: each class against the rest, by hand
  "auroc_bf16_probabilities": np.mean([m.roc_auc_score(target == c, probs16[:, c])
                                       for c in range(probs16.shape[1])]),
}
for avg in ("macro", "micro", "weighted"):
  out["precision_" + avg] = m.precision_score(target, pred, average=avg, zero_division=0)
  out["recall_" + avg] = m.recall_score(target, pred, average=avg, zero_division=0)
  out["f1_" + avg] = m.f1_score(target, pred, average=avg, zero_division=0)
for k, v in out.items(): print(k, repr(float(v)))
)py");
  auto r = run({kPython, (d / "ref.py").string(), d.path().string()});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::map<std::string, double> ref;
  std::istringstream in(r.out);
  for (std::string k; in >> k;) in >> ref[k];
  REQUIRE(ref.size() == 20);
  auto check = [&](const std::string& key, const std::string& toml, const auto& batches) {
    INFO(key);
    CHECK(value_of(toml, batches) == Approx(ref.at(key)).epsilon(1e-9).margin(1e-12));
  };
  check("accuracy", "plugin = \"accuracy\"", cls);
  check("top3", "plugin = \"top_k_accuracy\"\nk = 3", cls);
  for (const std::string avg : {"macro", "micro", "weighted"})
    for (const std::string m : {"precision", "recall", "f1"})
      check(m + "_" + avg, "plugin = \"" + m + "\"\naverage = \"" + avg + "\"", cls);
  check("auroc_ovr", "plugin = \"auroc\"", cls);
  check("auroc_unit_logits", "plugin = \"auroc\"", batches_of(torch::sigmoid(logits), target));
  check("auroc_probabilities", "plugin = \"auroc\"",
        batches_of(torch::softmax(logits / 3, 1), target));
  REQUIRE((probs16.to(torch::kDouble).sum(1) - 1).abs().max().item<double>() > 1e-3);
  check("auroc_bf16_probabilities", "plugin = \"auroc\"", batches_of(probs16, target));
  check("auroc_binary", "plugin = \"auroc\"",
        batches_of((logits.select(1, 0) * 2).round() / 2, target.eq(0).to(torch::kLong)));
  check("mae", "plugin = \"mae\"", reg);
  check("mse", "plugin = \"mse\"", reg);
  check("rmse", "plugin = \"rmse\"", reg);
  check("r2", "plugin = \"r2\"", reg);
}

namespace {

std::string fit_config(const TempDir& d, const std::string& out) {
  return "[trainer]\nepochs = 1\nbatch_size = 16\nvalid_batch_size = 16\noutput_dir = \"" +
         (d / out).string() +
         "\"\n[task]\nplugin = \"synthetic\"\nsamples = 64\nvalid_samples = 100\nclasses = 5\n"
         // A learning rate that leaves the weights as initialised: every run validates the
         // same model.
         "[optimizer]\nname = \"sgd\"\nlr = 1e-30\n"
         "[[metrics]]\nplugin = \"accuracy\"\nname = \"acc\"\n"
         "[[metrics]]\nplugin = \"f1\"\nname = \"f1_macro\"\n"
         "[[metrics]]\nplugin = \"confusion_matrix\"\n"
         "[[metrics]]\nplugin = \"auroc\"\n"
         "[[hooks]]\nplugin = \"ddp\"\n";
}

}  // namespace

TEST_CASE(
    "wick fit logs whole-set metrics, and two data-parallel ranks give what one process gives") {
  need_program("gnuplot", "gnuplot-nox");  // `wick plot` draws the confusion matrix
  TempDir d;
  write_file(d / "cfg.toml", fit_config(d, "one"));
  // check builds them, describe lists them.
  auto checked = run_wick({"check", (d / "cfg.toml").string()});
  CHECK(checked.out == (d / "cfg.toml").string() + ": ok (task synthetic, 1 hook, 4 metrics)\n");
  auto described = run_wick({"describe", (d / "cfg.toml").string()});
  CHECK(described.out.find("Metrics (over the whole validation set):\n  valid/acc: accuracy (") !=
        std::string::npos);
  auto one = run_wick({"fit", (d / "cfg.toml").string()});
  INFO(one.err << one.out);
  REQUIRE(one.exit_code == 0);
  const auto records = read_jsonl(d / "one" / "metrics.jsonl");
  REQUIRE_FALSE(records.empty());
  const auto& epoch = records.back();
  REQUIRE(epoch["kind"] == "epoch");
  // Accuracy is the one metric a batch-size-weighted mean gets right: the task's own agrees.
  CHECK(epoch["valid/acc"].get<double>() ==
        Approx(epoch["valid/accuracy"].get<double>()).epsilon(1e-12));
  const double f1 = epoch["valid/f1_macro"].get<double>();
  CHECK(f1 >= 0.0);
  CHECK(f1 <= 1.0);
  const auto summary = read_json(d / "one" / "summary.json");
  CHECK(summary["valid/f1_macro"].get<double>() == f1);
  // The confusion matrix: 100 samples, its diagonal the correct ones.
  std::istringstream csv(read_file(d / "one" / "confusion_matrix.csv"));
  std::string line;
  std::getline(csv, line);
  CHECK(line == "true/predicted,0,1,2,3,4");
  double total = 0, diagonal = 0;
  for (int i = 0; std::getline(csv, line); ++i) {
    std::istringstream cells(line);
    std::string cell;
    std::getline(cells, cell, ',');
    CHECK(cell == std::to_string(i));
    for (int j = 0; std::getline(cells, cell, ','); ++j) {
      total += std::stod(cell);
      if (i == j) diagonal += std::stod(cell);
    }
  }
  CHECK(total == 100);
  CHECK(diagonal / total == Approx(epoch["valid/acc"].get<double>()).epsilon(1e-12));

  // `wick plot` draws it as a heatmap beside it; a CSV of that header that is not a square
  // of counts is skipped with the reason.
  write_file(d / "one" / "bad.csv", "true/predicted,0,1\n0,1,x\n");
  auto plot = run_wick({"plot", (d / "one").string()});
  INFO(plot.err << plot.out);
  CHECK(plot.exit_code == 0);
  CHECK(plot.out.find("wick: plot " + (d / "one" / "confusion_matrix.png").string() +
                      " (heatmap of confusion_matrix.csv)") != std::string::npos);
  CHECK(read_file(d / "one" / "confusion_matrix.png").rfind("\x89PNG", 0) == 0);
  CHECK(plot.err.find("skipping '" + (d / "one" / "bad.csv").string() +
                      "': row 1 is not 2 counts") != std::string::npos);
  CHECK_FALSE(fs::exists(d / "one" / "bad.png"));

  // Two ranks of 50 validation samples each: their summed states give the same values.
  write_file(d / "cfg.toml", fit_config(d, "two"));
  auto two = run_wick({"fit", (d / "cfg.toml").string(), "--nproc", "2"});
  INFO(two.err << two.out);
  REQUIRE(two.exit_code == 0);
  const auto epoch2 = read_jsonl(d / "two" / "metrics.jsonl").back();
  CHECK(epoch2["valid/f1_macro"].get<double>() == Approx(f1).epsilon(1e-12));
  CHECK(epoch2["valid/acc"].get<double>() ==
        Approx(epoch["valid/acc"].get<double>()).epsilon(1e-12));
  CHECK(read_file(d / "two" / "confusion_matrix.csv") ==
        read_file(d / "one" / "confusion_matrix.csv"));
  // AUROC ranks every sample's scores: the ranks' rows are joined, not summed.
  const double auroc = epoch["valid/auroc"].get<double>();
  CHECK(auroc > 0.0);
  CHECK(epoch2["valid/auroc"].get<double>() == Approx(auroc).epsilon(1e-12));
}
