// The step engine in process, without a Trainer or the CLI (white-box: framework/src/loop): a
// training step's points and stages in order, one SGD step to the hand-computed weight and the
// loop's counters moved; the backward pass on the stepping thread; a handler that ends the
// optimizer_step chain; nan_policy "skip" and "error"; recompute_loss inside an optimizer_step
// handler; manual optimization; each service refused outside its place. The hooks are a
// hand-written StageRunner that logs what runs, the batches a hand-written BatchSource, the model a
// single weight.
#include <c10/core/AutogradState.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "loop/step_engine.hpp"
#include "support.hpp"

using namespace wick;

namespace {

// pred = w x with one weight w (1 at the start); loss = mean((pred - target)^2).
struct Line : torch::nn::Module {
  Line() { w = register_parameter("w", torch::ones({1})); }
  at::Tensor w;
};

class LineTask : public Task {
 public:
  std::shared_ptr<torch::nn::Module> model() override { return line; }
  std::shared_ptr<Dataset> train_data() override { return nullptr; }
  at::Tensor forward(Context&, const Batch& b) override { return b.input * line->w; }
  Output loss(Context&, const at::Tensor& pred, const Batch& b) override {
    return {pred, (pred - b.target).pow(2).mean(), {{"first", b.input[0]}}};
  }
  bool manual_optimization() const override { return manual_step != nullptr; }
  // Under manual optimization: the task's own step, given the engine (a plugin's task would
  // reach it through its Context).
  Output train_step(Context& c, const Batch& b) override { return manual_step(c, b); }

  std::shared_ptr<Line> line = std::make_shared<Line>();
  std::function<Output(Context&, const Batch&)> manual_step;
};

// The hooks as the engine sees them: logs each point and stage, runs a stage's default, or a
// handler of the test's around it.
struct Hooks : StageRunner {
  explicit Hooks(Context& c) : ctx(c) {}
  void emit(Point p) override { log.emplace_back(to_string(p)); }
  void set_where(std::string_view) override {}
  void set_terminal(Stage s, std::function<bool(Context&)> fn) override {
    terminal[static_cast<std::size_t>(s)] = std::move(fn);
  }
  bool run_stage(Stage s) override {
    log.push_back("[" + std::string(to_string(s)) + "]");
    const auto& rest = terminal[static_cast<std::size_t>(s)];
    return handler ? handler(s, [&] { return rest(ctx); }) : rest(ctx);
  }
  Profiler* profiler() const override { return nullptr; }
  bool left_unrun(Point) const override { return false; }

  Context& ctx;
  std::array<std::function<bool(Context&)>, kNumStages> terminal;
  std::function<bool(Stage, const std::function<bool()>&)> handler;
  std::vector<std::string> log;
};

// One batch, inputs 1 and 2, targets 3 and 5 (or what a test puts there), with a data state.
struct OneBatch : BatchSource {
  explicit OneBatch(std::vector<std::string>& l) : log(l) {}
  std::int64_t size_of(std::int64_t) const override { return batch.input.size(0); }
  Loaded take(std::int64_t b) override {
    log.push_back("take " + std::to_string(b));
    return {batch, state};
  }
  std::vector<std::string>& log;
  Batch batch{torch::tensor({1.0f, 2.0f}), torch::tensor({3.0f, 5.0f})};
  std::shared_ptr<StateDict> state = std::make_shared<StateDict>();
};

// What a StepEngine works with, as a trainer owns it; SGD at rate 0.1 on the weight. The
// Context has no framework behind it: the task and the stages' defaults here ask nothing of it.
struct Rig {
  Rig() {
    optimizers.push_back({"optimizer",
                          std::make_unique<torch::optim::SGD>(task->line->parameters(),
                                                              torch::optim::SGDOptions(0.1)),
                          {}});
    engine.install_stage_defaults();
    state.epoch = 2;
    state.batch_idx = 3;
    state.batches_in_epoch = 10;
  }
  double w() const { return task->line->w.item<double>(); }
  void step() { engine.train_step(batches); }

  TrainerOptions opt;
  torch::Device device{torch::kCPU};
  Context ctx{nullptr};
  Hooks hooks{ctx};
  std::shared_ptr<Task> task_ = std::make_shared<LineTask>();  // the engine's binding
  LineTask* task = static_cast<LineTask*>(task_.get());
  std::vector<NamedOptimizer> optimizers;
  StepState state;
  LoopPlace loop;
  FlopMeter flops;
  RunTimes times;
  EpochValues epoch;
  OneBatch batches{hooks.log};
  StepEngine engine{{opt, device, hooks, ctx, task_, optimizers, state, loop, flops, times, epoch,
                     [this] { hooks.log.emplace_back("record"); }}};
};

// loss = ((w - 3)^2 + (2w - 5)^2) / 2; at w = 1 it is 6.5 and its gradient
// ((w - 3) * 1 + (2w - 5) * 2) = -8, so one SGD step at 0.1 leaves w = 1.8.
constexpr double kLoss = 6.5, kGrad = -8.0, kLr = 0.1;

}  // namespace

TEST_CASE(
    "step engine: a training step's points and stages in order, one SGD step to the hand-computed "
    "weight") {
  Rig rig;
  rig.step();
  const std::vector<std::string> expected = {"before_step", "take 3",         "[gradients]",
                                             "[forward]",   "after_pred",     "after_loss",
                                             "[backward]",  "after_backward", "[optimizer_step]",
                                             "[zero_grad]", "record",         "after_step"};
  CHECK(rig.hooks.log == expected);
  CHECK(rig.w() == Approx(1.0 - kLr * kGrad));
  CHECK_FALSE(rig.task->line->w.grad().defined());  // zero_grad sets gradients to none
  // The loop's counters and place.
  CHECK(rig.state.stepped);
  CHECK(rig.state.optimizer_step == 1);
  CHECK(rig.state.micro_step == 1);
  CHECK(rig.state.batch_size == 2);
  CHECK(rig.state.samples_seen == 2);
  CHECK(rig.times.samples_this_run == 2);
  CHECK(rig.loop.phase == LoopPhase::fit);
  CHECK(rig.loop.pos.epoch == 2);
  CHECK(rig.loop.pos.batch == 4);
  CHECK(rig.loop.data_state == rig.batches.state);
  // The step's values go to the epoch, unread.
  REQUIRE(rig.epoch.losses.size() == 1);
  CHECK(rig.epoch.losses[0].item<double>() == Approx(kLoss));
  REQUIRE(rig.epoch.names == std::vector<std::string>{"first"});
  CHECK(rig.epoch.metrics[0][0].item<double>() == 1.0);
  // With two processes, samples_seen counts the job's samples.
  rig.state.num_processes = 2;
  rig.step();
  CHECK(rig.state.samples_seen == 2 + 4);
}

TEST_CASE(
    "step engine: the backward pass runs on the stepping thread, not LibTorch's autograd "
    "thread for the device") {
#if TORCH_VERSION_MAJOR < 2
  wick::test::skip("LibTorch " TORCH_VERSION " has no switch for its autograd threads");
#else
  Rig rig;
  // Seen by a hook on the prediction's gradient, which runs inside the pass.
  std::optional<bool> threaded;
  std::thread::id ran_on;
  rig.hooks.handler = [&](Stage s, const std::function<bool()>& rest) {
    const bool r = rest();
    if (s == Stage::forward)
      rig.engine.output.pred.register_hook([&](const at::Tensor&) {
        threaded = c10::AutogradState::get_tls_state().get_multithreading_enabled();
        ran_on = std::this_thread::get_id();
      });
    return r;
  };
  REQUIRE(c10::AutogradState::get_tls_state().get_multithreading_enabled());
  rig.step();
  REQUIRE(threaded.has_value());
  CHECK_FALSE(*threaded);
  CHECK(ran_on == std::this_thread::get_id());
  CHECK(rig.w() == Approx(1.0 - kLr * kGrad));
  // Set for the pass only.
  CHECK(c10::AutogradState::get_tls_state().get_multithreading_enabled());
#endif
}

TEST_CASE(
    "step engine: a handler that ends the optimizer_step chain takes no step, and the gradients "
    "are still cleared") {
  Rig rig;
  rig.hooks.handler = [](Stage s, const std::function<bool()>& rest) {
    return s == Stage::optimizer_step ? false : rest();
  };
  rig.step();
  CHECK(rig.w() == 1.0);
  CHECK_FALSE(rig.state.stepped);
  CHECK(rig.state.optimizer_step == 0);
  CHECK(rig.state.micro_step == 1);
  CHECK_FALSE(rig.task->line->w.grad().defined());
  CHECK(rig.epoch.losses.size() == 1);  // the step ran; only its update was declined
}

TEST_CASE(
    "step engine: nan_policy skip drops a non-finite step, error keeps it for the deferred check") {
  Rig rig;
  rig.batches.batch.target = torch::tensor({3.0f, std::numeric_limits<float>::quiet_NaN()});
  SECTION("skip: no backward, no update, the step counted as skipped, its loss not averaged") {
    rig.opt.nan_policy = NanPolicy::skip;
    rig.step();
    CHECK(rig.w() == 1.0);
    CHECK(rig.state.skipped_steps == 1);
    CHECK(rig.state.optimizer_step == 0);
    CHECK(rig.state.micro_step == 1);
    CHECK(rig.epoch.losses.empty());
    CHECK(std::find(rig.hooks.log.begin(), rig.hooks.log.end(), "[backward]") ==
          rig.hooks.log.end());
    // The next finite step goes through.
    rig.batches.batch.target = torch::tensor({3.0f, 5.0f});
    rig.step();
    CHECK(rig.w() == Approx(1.0 - kLr * kGrad));
    CHECK(rig.state.skipped_steps == 1);
  }
  SECTION("error: the step runs unread, and the check names its epoch and batch") {
    rig.opt.nan_policy = NanPolicy::error;
    rig.step();
    CHECK(std::isnan(rig.w()));  // nothing waited for the loss
    CHECK_FALSE(rig.engine.loss_check.failed());
    REQUIRE_THROWS_WITH(rig.engine.loss_check.verify(),
                        Catch::Contains("non-finite loss (") &&
                            // "nan" or "-nan": the sign of a NaN is the CPU kernels' choice
                            Catch::Contains("nan) at epoch 2, batch 3"));
    CHECK(rig.engine.loss_check.failed());
  }
  SECTION("ignore: nothing checked") {
    rig.opt.nan_policy = NanPolicy::ignore;
    rig.step();
    CHECK(std::isnan(rig.w()));
    CHECK_NOTHROW(rig.engine.loss_check.verify());
  }
}

TEST_CASE(
    "step engine: recompute_loss in an optimizer_step handler runs a second pass and puts the "
    "step's output back") {
  Rig rig;
  double second = 0;
  at::Tensor first_loss;
  rig.hooks.handler = [&](Stage s, const std::function<bool()>& rest) {
    if (s == Stage::optimizer_step) {
      first_loss = rig.engine.output.loss;
      second = rig.engine.handler_recompute_loss().item<double>();
      CHECK(rig.loop.phase == LoopPhase::step);
    }
    return rest();
  };
  rig.step();
  CHECK(second == Approx(kLoss));  // the same weights, the same batch
  // The second backward added its gradient to the first: twice the step.
  CHECK(rig.w() == Approx(1.0 - 2 * kLr * kGrad));
  CHECK(rig.engine.output.loss.is_same(first_loss));
  CHECK(rig.state.optimizer_step == 1);
  // Outside an optimizer_step handler of a training step it is refused.
  CHECK_THROWS_WITH(rig.engine.handler_recompute_loss(),
                    Catch::Contains("for an optimizer_step handler of a training step"));
}

TEST_CASE(
    "step engine: under manual optimization the task's train_step backs and steps through the "
    "engine") {
  Rig rig;
  // Refused outside a manual step.
  CHECK_THROWS_WITH(rig.engine.manual_backward(torch::ones({}), "optimizer"),
                    Catch::Contains("under manual optimization"));
  rig.task->manual_step = [&](Context& c, const Batch& b) {
    auto pred = rig.task->forward(c, b);
    Output o = rig.task->loss(c, pred, b);
    rig.engine.manual_backward(o.loss, "optimizer");
    CHECK(rig.engine.manual_step("optimizer"));
    rig.engine.manual_zero_grad("optimizer");
    CHECK_THROWS_WITH(rig.engine.manual_step("other"), Catch::Contains("optimizer"));
    return o;
  };
  rig.engine.manual = rig.task->manual_optimization();
  rig.step();
  CHECK(rig.w() == Approx(1.0 - kLr * kGrad));
  CHECK(rig.state.optimizer_step == 1);
  CHECK(rig.epoch.losses.size() == 1);
  // The task ran its own forward: no gradients stage, and after_pred and after_loss once each.
  const std::vector<std::string> expected = {"before_step",    "take 3",           "[backward]",
                                             "after_backward", "[optimizer_step]", "[zero_grad]",
                                             "[zero_grad]",    "after_pred",       "after_loss",
                                             "record",         "after_step"};
  CHECK(rig.hooks.log == expected);
}
