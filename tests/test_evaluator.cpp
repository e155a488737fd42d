// The evaluator in-process, without a Trainer or the CLI (white-box: framework/src/loop): a
// validation pass over batches of unequal size gives sample-weighted values and puts the
// loop's position back, a cancelled batch is left out, and prediction returns every sample's
// row in sample order. The forward is a hand-written ForwardPass of a boring model.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/sampler.hpp"
#include "loop/evaluator.hpp"
#include "support.hpp"
#include "wick/metric.hpp"

using namespace wick;

namespace {

// pred = 2 x; loss = the batch's mean of pred; a per-batch value "first" = its first input.
// cancel_at: the batch (by its first input) whose forward throws CancelStep; short_rows: a
// prediction one row short.
class Doubling : public ForwardPass {
 public:
  const Output& run_batch(Batch b, bool with_loss) override {
    batch_ = std::move(b);
    out_ = Output{};
    if (batch_.input[0][0].item<double>() == cancel_at) throw CancelStep();
    out_.pred = batch_.input * 2;
    if (short_rows) out_.pred = out_.pred.slice(0, 1);
    if (with_loss) {
      out_.loss = out_.pred.mean();
      out_.metrics = {{"first", batch_.input[0][0]}};
      ++with_loss_calls;
    }
    ++calls;
    return out_;
  }
  const Batch& running_batch() const override { return batch_; }

  int calls = 0, with_loss_calls = 0;
  double cancel_at = -1;
  bool short_rows = false;

 private:
  Batch batch_;
  Output out_;
};

// The points a pass emits, in order; one process.
struct Recorded : Evaluator::Events, Evaluator::Ranks {
  void emit(Point p) override { points.emplace_back(to_string(p)); }
  void set_where(std::string_view) override {}
  bool distributed() const override { return false; }
  void all_reduce_sum(at::Tensor&) const override {}
  std::vector<std::string> points;
};

// What an Evaluator works with, as a trainer would own it: samples 0, 1, ..., n - 1 (inputs
// [n, 1]), validation batches of bs.
struct Rig {
  explicit Rig(std::int64_t n, std::int64_t bs) {
    run.valid_batch_size = bs;
    x = torch::arange(n, torch::kFloat).unsqueeze(1);
    valid = std::make_shared<TensorDataset>(x, x);
  }
  TrainerOptions opt;
  RunInfo run;
  torch::Device device{torch::kCPU};
  std::shared_ptr<torch::nn::Module> model = std::make_shared<torch::nn::Module>();
  at::Tensor x;
  std::shared_ptr<Dataset> valid;
  StepState state;
  Recorded host;
  Doubling pass;
  std::vector<CancelScope> cancels;
  Evaluator eval{{opt, run, device, model, valid, state, host, pass, host,
                  [this](CancelScope s) { cancels.push_back(s); }, [] { return false; }}};

  double value(const ValidResult& r, const std::string& name) const {
    for (const auto& [k, v] : r.values)
      if (k == name) return v;
    FAIL("no value " << name);
    return 0;
  }
};

}  // namespace

TEST_CASE("evaluator: validation weighs each batch by its samples and puts the loop back") {
  Rig rig(10, 4);  // batches of 4, 4 and 2
  rig.state.batch_idx = 7;
  rig.state.batches_in_epoch = 20;
  const auto r = rig.eval.validation(rig.valid.get());
  CHECK(r.samples == 10);
  CHECK(rig.pass.with_loss_calls == 3);
  // The mean of 2 x over 0..9, whatever the batches: 9. "first": the batches' first inputs 0,
  // 4 and 8, weighted 4, 4 and 2: (0 + 16 + 16) / 10.
  CHECK(rig.value(r, "valid/loss") == Approx(9.0));
  CHECK(rig.value(r, "valid/first") == Approx(3.2));
  CHECK(rig.state.batch_idx == 7);
  CHECK(rig.state.batches_in_epoch == 20);
  CHECK(rig.state.phase == Phase::train);
  CHECK(rig.model->is_training());
  CHECK(rig.cancels.empty());
  const std::vector<std::string> points = {"before_valid", "before_step", "after_step",
                                           "before_step",  "after_step",  "before_step",
                                           "after_step"};
  CHECK(rig.host.points == points);
  // Another split's prefix; no data, no values.
  CHECK(rig.eval.validation(rig.valid.get(), "train/").values.front().first == "train/loss");
  CHECK(rig.eval.validation(nullptr).values.empty());
}

TEST_CASE("evaluator: a batch cancelled with CancelStep is left out of the values") {
  Rig rig(10, 4);
  rig.pass.cancel_at = 4;  // the second batch, samples 4..7
  const auto r = rig.eval.validation(rig.valid.get());
  REQUIRE(rig.cancels.size() == 1);
  CHECK(rig.cancels[0] == CancelScope::step);
  CHECK(r.samples == 6);
  // 2 x over samples 0..3 and 8, 9: (0 + 2 + 4 + 6 + 16 + 18) / 6.
  CHECK(rig.value(r, "valid/loss") == Approx(46.0 / 6));
}

TEST_CASE("evaluator: prediction gives every sample's row in order, one row per sample") {
  Rig rig(10, 4);
  const auto rows = rig.eval.prediction(*rig.valid, "the validation data", nullptr);
  CHECK(rig.pass.calls == 3);
  CHECK(rig.pass.with_loss_calls == 0);  // the forward stage alone
  REQUIRE(rows.sizes() == at::IntArrayRef({10, 1}));
  CHECK(torch::equal(rows, rig.x * 2));
  CHECK(rig.model->is_training());

  rig.pass.short_rows = true;
  CHECK_THROWS_WITH(rig.eval.prediction(*rig.valid, "the validation data", nullptr),
                    Catch::Matchers::Contains("predict needs one output row per sample"));
}

TEST_CASE("evaluator: an evaluation plan cuts the order into batches of valid_batch_size") {
  Rig rig(10, 4);
  const auto order = torch::arange(10, torch::kLong);
  const auto plan = rig.eval.eval_plan(*rig.valid, order, "the validation data");
  CHECK(plan.end == 3);
  CHECK(torch::equal(plan.indices(2), torch::tensor({8, 9}, torch::kLong)));
  CHECK(plan.phase == Phase::valid);
}

TEST_CASE("validation shards: contiguous, sizes within one, none empty while samples >= ranks") {
  auto shard = [](std::int64_t n, std::int64_t world, std::int64_t rank) {
    const at::Tensor o = valid_order(n, {world, rank});
    return std::vector<std::int64_t>(o.data_ptr<std::int64_t>(),
                                     o.data_ptr<std::int64_t>() + o.numel());
  };
  // 4 over 3 ranks: rounding up per rank gave 2, 2 and none (a rank with no values to sum).
  CHECK(shard(4, 3, 0) == std::vector<std::int64_t>{0, 1});
  CHECK(shard(4, 3, 1) == std::vector<std::int64_t>{2});
  CHECK(shard(4, 3, 2) == std::vector<std::int64_t>{3});
  CHECK(shard(101, 2, 0).size() == 51);
  CHECK(shard(101, 2, 1).front() == 51);
  CHECK(shard(101, 2, 1).back() == 100);
  CHECK_NOTHROW(check_valid_shards(3, {3, 2}, "the validation data"));
  CHECK_NOTHROW(check_valid_shards(1, {1, 0}, "the validation data"));
  CHECK_THROWS_WITH(check_valid_shards(2, {3, 1}, "the validation data"),
                    Catch::Contains("the validation data has 2 sample(s), fewer than the 3 "
                                    "ranks") &&
                        Catch::Contains("run fewer ranks (--nproc)"));
}

namespace {

// The mean of the targets above 100: NaN (0 / 0) on data that has none, as a class's recall
// is on data without that class.
class MeanAbove100 : public Metric {
 public:
  MeanAbove100() = default;
  // Logged under each of these keys.
  explicit MeanAbove100(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  void update(const at::Tensor&, const at::Tensor& target) override {
    if (state_.empty()) state_ = {torch::zeros({2}, torch::kDouble)};
    const auto above = target.gt(100);
    state_[0][0] += target.masked_select(above).sum().item<double>();
    state_[0][1] += above.sum().item<double>();
  }
  std::vector<std::pair<std::string, double>> compute() const override {
    std::vector<std::pair<std::string, double>> out;
    for (const auto& k : keys_)
      out.emplace_back(k, state_[0][0].item<double>() / state_[0][1].item<double>());
    return out;
  }
  std::vector<at::Tensor>& state() override { return state_; }

 private:
  std::vector<std::string> keys_{""};
  std::vector<at::Tensor> state_;
};

}  // namespace

TEST_CASE("evaluator: a metric's NaN is warned of once, naming the metric and its key") {
  Rig rig(10, 4);
  rig.eval.add_metric({std::make_shared<MeanAbove100>(), "mean_above", "undefined"});
  std::string out, err;
  ValidResult first, second;
  wick::test::capturing(
      [&] {
        first = rig.eval.validation(rig.valid.get());
        second = rig.eval.validation(rig.valid.get());
      },
      out, err);
  CHECK(std::isnan(rig.value(first, "valid/undefined")));
  CHECK(std::isnan(rig.value(second, "valid/undefined")));
  const std::string warning =
      "wick: warning: metric 'undefined' (plugin 'mean_above') gave NaN for valid/undefined "
      "(metrics.jsonl writes null): undefined on this data (a class with no samples?), or a "
      "bug in the plugin; said once\n";
  CHECK(err == warning);  // once, for two validations
}

TEST_CASE("evaluator: a metric's keys are words, each once, or the validation names the fault") {
  auto message = [&](std::vector<std::string> keys) {
    Rig r(10, 4);
    r.eval.add_metric({std::make_shared<MeanAbove100>(std::move(keys)), "mean_above", "m"});
    try {
      std::string out, err;
      wick::test::capturing([&] { r.eval.validation(r.valid.get()); }, out, err);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message({"a", "b.c", "d-e_1"}).empty());
  CHECK_THAT(message({"a,b"}), Catch::Contains("compute() gave a value under the key 'a,b'; a "
                                               "key is \"\" or at most 64 letters"));
  CHECK_THAT(message({"x", "x"}), Catch::Contains("compute() gave two values under the key 'x'"));
}
