// The technique plugins, loaded from build/lib/wick/plugins through the Config API and run
// on a deterministic linear-regression task, checked against references computed here.
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <wick/autocast.hpp>
#include <wick/config.hpp>
#include <wick/loader.hpp>
#include <wick/sha256.hpp>
#include <wick/state_dict.hpp>
#include <wick/task.hpp>
#include <wick/torch_compat.hpp>
#include <wick/trainer.hpp>

#include "../plugins/mixed_precision/loss_scaler.hpp"
#include "in_process.hpp"
#include "support.hpp"

using namespace wick;
using wick::test::entry;
using wick::test::load_hooks;
using wick::test::options;
using wick::test::TempDir;

namespace {

constexpr std::int64_t kIn = 4, kOut = 3;

// y = x A + noise on fixed data; the model is a Linear layer initialised from the trainer seed.
class LinearTask : public Task {
 public:
  explicit LinearTask(std::int64_t n, std::int64_t valid = 0, at::ScalarType dtype = torch::kFloat)
      : dtype_(dtype) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    auto a = torch::randn({kIn, kOut}, gen);
    x_ = torch::randn({n, kIn}, gen).to(dtype);
    y_ = x_.matmul(a.to(dtype)) + 0.1 * torch::randn({n, kOut}, gen).to(dtype);
    train_ = std::make_shared<TensorDataset>(x_, y_);
    if (valid > 0) {
      auto vx = torch::randn({valid, kIn}, gen);
      valid_ = std::make_shared<TensorDataset>(vx, vx.matmul(a));
    }
  }
  std::shared_ptr<torch::nn::Module> model() override {
    lin_ = torch::nn::Linear(kIn, kOut);
    lin_->to(dtype_);
    return lin_.ptr();
  }
  std::shared_ptr<Dataset> train_data() override { return train_; }
  std::shared_ptr<Dataset> valid_data() override { return valid_; }
  at::Tensor forward(Context& c, const Batch& b) override {
    auto pred = lin_->forward(b.input);
    if (on_forward) on_forward(c, pred);
    return pred;
  }
  Output loss(Context&, const at::Tensor& pred, const Batch& b) override {
    Output o;
    o.loss = torch::mse_loss(pred.to(b.target.scalar_type()), b.target);
    return o;
  }

  at::Tensor x_, y_;
  // Sees each prediction as the model made it (inside the forward stage).
  std::function<void(Context&, const at::Tensor&)> on_forward;

 private:
  at::ScalarType dtype_;
  std::shared_ptr<TensorDataset> train_, valid_;
  torch::nn::Linear lin_{nullptr};
};

// An in-test hook: handlers in every stage and at every point, each optional.
struct Probe : Hook {
  std::function<void(Context&, Stage)> stage_fn;
  std::map<Point, std::function<void(Context&)>> points;
  std::function<void(const Record&)> record_fn;
  bool stages = true;
  void connect(Registrar& r) override {
    if (record_fn) r.on_record(record_fn);
    if (stages)
      for (Stage s : {Stage::backward, Stage::optimizer_step, Stage::zero_grad})
        r.stage(s, [this, s](Context& c, Next next) {
          if (stage_fn) stage_fn(c, s);
          return next();
        });
    for (auto& [p, fn] : points) r.on(p, fn);
  }
};

// A hook that restores the checkpoint `folder` at before_fit, first of all hooks.
void restore_at_start(Trainer& t, const std::string& folder) {
  auto restorer = std::make_shared<Probe>();
  restorer->stages = false;
  restorer->points[Point::before_fit] = [folder](Context& c) { c.restore_checkpoint(folder); };
  t.add_hook(entry(restorer, "restorer", -200));
}

OptimizerOptions optimizer(const std::string& name, double lr) {
  OptimizerOptions o;
  o.kind = optimizer_kind(name).value();
  o.lr = lr;
  if (name == "sgd") o.momentum = 0.9;
  return o;
}

std::vector<at::Tensor> params_of(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}
std::vector<at::Tensor> params_of(Trainer& t) {
  return params_of(t.model());
}

double max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

StateDict state_of(const HookEntry& e) {
  StateDict s;
  e.hook->save_state(s);
  return s;
}

// Closed-form gradient of mean((x W^T + b - y)^2) over all n * kOut elements.
std::pair<at::Tensor, at::Tensor> mse_grad(const at::Tensor& w, const at::Tensor& b,
                                           const at::Tensor& x, const at::Tensor& y) {
  auto r = (x.matmul(w.t()) + b - y) * (2.0 / static_cast<double>(x.size(0) * kOut));
  return {r.t().matmul(x), r.sum(0)};
}

}  // namespace

// ---- records ------------------------------------------------------------------------------

TEST_CASE("train/loss weighs each batch by its samples, as valid/loss does",
          "[techniques][records]") {
  // 50 samples in batches of 16, 16, 16 and 2; a step record every 2 batches.
  auto o = options(16);
  o.log_every = 2;
  Trainer t(o, std::make_shared<LinearTask>(50), optimizer("sgd", 0.05));
  std::vector<std::pair<double, double>> seen;  // each batch's loss and samples
  std::vector<double> logged;
  auto probe = std::make_shared<Probe>();
  probe->stages = false;
  probe->points[Point::after_loss] = [&](Context& c) {
    seen.emplace_back(c.output().loss.item<double>(), static_cast<double>(c.state().batch_size));
  };
  probe->record_fn = [&](const Record& r) {
    for (const auto& [k, v] : r.values)
      if (k == "train/loss") logged.push_back(v);
  };
  t.add_hook(entry(probe, "probe", 0));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  REQUIRE(seen.size() == 4);
  REQUIRE(seen[3].second == 2);
  auto mean = [&](std::size_t from, std::size_t to) {
    double sum = 0, n = 0;
    for (std::size_t i = from; i < to; ++i) {
      sum += seen[i].first * seen[i].second;
      n += seen[i].second;
    }
    return sum / n;
  };
  REQUIRE(logged.size() == 3);  // two step records, then the epoch's
  CHECK(logged[0] == Approx(mean(0, 2)).epsilon(1e-12));
  CHECK(logged[1] == Approx(mean(2, 4)).epsilon(1e-12));  // a mean of the 2 means is not
  CHECK(logged[2] == Approx(mean(0, 4)).epsilon(1e-12));
  CHECK(std::abs(logged[2] - (seen[0].first + seen[1].first + seen[2].first + seen[3].first) / 4) >
        1e-6);
}

TEST_CASE("a record's lr is the one its last step trained with", "[techniques][records]") {
  // A schedule sets the next step's lr at after_step, before the epoch's record is written.
  auto o = options(4, 2);
  o.log_every = 1;
  Trainer t(o, std::make_shared<LinearTask>(24), optimizer("sgd", 0.1));
  for (auto& h : load_hooks("[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosine\"\n"))
    t.add_hook(std::move(h));
  std::vector<double> used;
  std::vector<std::pair<Record::Kind, double>> logged;
  auto probe = std::make_shared<Probe>();
  probe->stage_fn = [&](Context& c, Stage s) {
    if (s == Stage::optimizer_step)
      used.push_back(c.optimizer().param_groups()[0].options().get_lr());
  };
  probe->record_fn = [&](const Record& r) {
    for (const auto& [k, v] : r.values)
      if (k == "lr") logged.emplace_back(r.kind, v);
  };
  t.add_hook(entry(probe, "probe", 100));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  REQUIRE(used.size() == 12);
  REQUIRE(logged.size() == 14);  // 6 steps and the epoch, twice
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i < 6; ++i) CHECK(logged[7 * e + i].second == used[6 * e + i]);
    CHECK(logged[7 * e + 6].first == Record::Kind::epoch);
    CHECK(logged[7 * e + 6].second == used[6 * e + 5]);
  }
  CHECK(used.back() > 0);  // the last record's lr was 0 before, an lr no step used
}

TEST_CASE("a fit while another thread's fit runs is refused, and a fit after it runs",
          "[techniques][threads]") {
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false, released = false;
  Trainer a(options(4), std::make_shared<LinearTask>(16), optimizer("sgd", 0.1));
  auto probe = std::make_shared<Probe>();
  probe->stages = false;
  probe->points[Point::after_step] = [&](Context&) {
    std::unique_lock<std::mutex> lock(mu);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  };
  a.add_hook(entry(probe, "probe", 0));
  FitResult::Status a_status{};
  std::thread other([&] { a_status = a.fit().status; });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return inside; });
  }
  Trainer b(options(4), std::make_shared<LinearTask>(16), optimizer("sgd", 0.1));
  CHECK_THROWS_WITH(b.fit(), Catch::Contains("fit() while another thread's fit runs in this "
                                             "process"));
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  other.join();
  CHECK(a_status == FitResult::Status::completed);
  CHECK(b.fit().status == FitResult::Status::completed);  // once the other has ended
}

TEST_CASE("a checkpoint after a hook changed the optimizer's groups is refused with the reason",
          "[techniques][checkpoint]") {
  TempDir dir;
  Trainer t(options(4), std::make_shared<LinearTask>(16), optimizer("sgd", 0.1));
  auto probe = std::make_shared<Probe>();
  probe->stages = false;
  probe->points[Point::after_step] = [&](Context& c) {
    if (c.state().optimizer_step == 1)  // a group of a tensor the model does not have
      c.optimizer().add_param_group(
          torch::optim::OptimizerParamGroup({torch::zeros({1}).requires_grad_()}));
    if (c.state().optimizer_step == 2) c.save_checkpoint((dir / "ckpt").string(), "test");
  };
  t.add_hook(entry(probe, "probe", 0));
  const auto r = t.fit();
  CHECK(r.status == FitResult::Status::failed);
  CHECK_THAT(r.error, Catch::Contains("not saving checkpoint 'ckpt' (test): the optimizer's "
                                      "parameter groups changed during this fit (sizes [2] when "
                                      "it started, [2, 1] now") &&
                          Catch::Contains("[[optimizer.groups]]"));
  CHECK_FALSE(std::filesystem::exists(dir / "ckpt"));
}

// ---- grad_accum ---------------------------------------------------------------------------

TEST_CASE("grad_accum: 4 micro-batches of 16 equal one step on 64", "[techniques][grad_accum]") {
  for (std::string opt : {"sgd", "adam"}) {
    DYNAMIC_SECTION(opt) {
      // 80 samples: windows of 4 x 16 and a last, short window of 1 x 16, against batches
      // of 64 and 16 without accumulation; two epochs.
      Trainer ref(options(64, 2), std::make_shared<LinearTask>(80), optimizer(opt, 0.05));
      ref.fit();
      Trainer acc(options(16, 2), std::make_shared<LinearTask>(80), optimizer(opt, 0.05));
      for (auto& h : load_hooks("[[hooks]]\nplugin = \"grad_accum\"\nsteps = 4\n"))
        acc.add_hook(std::move(h));
      auto res = acc.fit();
      REQUIRE(res.status == FitResult::Status::completed);
      CHECK(acc.state().optimizer_step == 4);
      CHECK(ref.state().optimizer_step == 4);
      CHECK(acc.state().grad_accum_steps == 4);
      CHECK(acc.state().micro_step == 10);
      CHECK(max_diff(params_of(acc), params_of(ref)) < 1e-6);
      // And the run really moved the parameters (the comparison is not of two idle models).
      Trainer idle(options(64, 1), std::make_shared<LinearTask>(80), optimizer(opt, 0.05));
      CHECK(max_diff(params_of(idle), params_of(ref)) > 1e-3);
    }
  }
}

TEST_CASE("grad_accum: a step record waits for its window's end, one record per step",
          "[techniques][grad_accum]") {
  // 5 batches of 16 an epoch, windows of 4 and 1, a record due every 2 batches: due at batches
  // 2 and 4 (window 1's end, step 1), 6 and 8 (epoch 1's first window, step 3), 10 (step 4).
  TempDir d;
  auto o = options(16, 2);
  o.log_every = 2;
  o.write_outputs = true;
  o.output_dir = (d / "run").string();
  Trainer t(o, std::make_shared<LinearTask>(80), optimizer("sgd", 0.05));
  for (auto& h : load_hooks("[[hooks]]\nplugin = \"grad_accum\"\nsteps = 4\n"))
    t.add_hook(std::move(h));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  std::vector<std::pair<std::int64_t, std::int64_t>> steps;  // (step, samples_seen)
  for (const auto& r : wick::test::read_jsonl(d / "run" / "metrics.jsonl"))
    if (r["kind"] == "step") steps.emplace_back(r["step"], r["samples_seen"]);
  using P = std::pair<std::int64_t, std::int64_t>;
  CHECK(steps == std::vector<P>{{1, 64}, {3, 144}, {4, 160}});
}

// ---- grad_clip ----------------------------------------------------------------------------

TEST_CASE("grad_clip: closed-form clipped gradient, once per real step",
          "[techniques][grad_clip]") {
  auto task = std::make_shared<LinearTask>(64);
  const double lr = 0.5;
  OptimizerOptions sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.lr = lr;

  auto run = [&](const std::string& hooks_toml, std::int64_t batch) {
    auto t = std::make_unique<Trainer>(options(batch), task, sgd);
    auto p0 = params_of(*t);
    for (auto& h : load_hooks(hooks_toml)) t->add_hook(std::move(h));
    REQUIRE(t->fit().status == FitResult::Status::completed);
    return std::make_pair(p0, params_of(*t));
  };

  SECTION("by norm, with accumulation: the full gradient is clipped once") {
    auto [p0, p1] =
        run("[[hooks]]\nplugin = \"grad_accum\"\nsteps = 4\n"
            "[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 0.25\n",
            16);
    auto [gw, gb] = mse_grad(p0[0], p0[1], task->x_, task->y_);
    const double norm = std::sqrt(gw.pow(2).sum().item<double>() + gb.pow(2).sum().item<double>());
    REQUIRE(norm > 0.5);  // the clip is active
    const double coef = 0.25 / (norm + 1e-6);
    CHECK((p1[0] - (p0[0] - lr * coef * gw)).abs().max().item<double>() < 1e-6);
    CHECK((p1[1] - (p0[1] - lr * coef * gb)).abs().max().item<double>() < 1e-6);
    // The step moved the parameters by exactly max_norm * lr.
    const double moved = std::sqrt((p1[0] - p0[0]).pow(2).sum().item<double>() +
                                   (p1[1] - p0[1]).pow(2).sum().item<double>());
    CHECK(moved == Approx(0.25 * lr).epsilon(1e-5));
  }
  SECTION("by value") {
    auto [p0, p1] = run("[[hooks]]\nplugin = \"grad_clip\"\nvalue = 0.1\n", 64);
    auto [gw, gb] = mse_grad(p0[0], p0[1], task->x_, task->y_);
    REQUIRE(gw.abs().max().item<double>() > 0.1);
    CHECK((p1[0] - (p0[0] - lr * gw.clamp(-0.1, 0.1))).abs().max().item<double>() < 1e-6);
    CHECK((p1[1] - (p0[1] - lr * gb.clamp(-0.1, 0.1))).abs().max().item<double>() < 1e-6);
  }
  SECTION("by max-abs norm (norm_type = inf)") {
    auto [p0, p1] = run("[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 0.1\nnorm_type = inf\n", 64);
    auto [gw, gb] = mse_grad(p0[0], p0[1], task->x_, task->y_);
    const double norm = std::max(gw.abs().max().item<double>(), gb.abs().max().item<double>());
    const double coef = 0.1 / (norm + 1e-6);
    CHECK((p1[0] - (p0[0] - lr * coef * gw)).abs().max().item<double>() < 1e-6);
    CHECK((p1[1] - (p0[1] - lr * coef * gb)).abs().max().item<double>() < 1e-6);
  }
  SECTION("a float64 model: its norm and clip in float64") {
    task = std::make_shared<LinearTask>(64, 0, torch::kDouble);
    auto [p0, p1] = run("[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 0.25\n", 64);
    REQUIRE(p1[0].scalar_type() == torch::kDouble);
    auto [gw, gb] = mse_grad(p0[0], p0[1], task->x_, task->y_);
    const double norm = std::sqrt(gw.pow(2).sum().item<double>() + gb.pow(2).sum().item<double>());
    REQUIRE(norm > 0.5);
    const double coef = 0.25 / (norm + 1e-6);
    // Float32's rounding would leave about 1e-8.
    CHECK((p1[0] - (p0[0] - lr * coef * gw)).abs().max().item<double>() < 1e-13);
    CHECK((p1[1] - (p0[1] - lr * coef * gb)).abs().max().item<double>() < 1e-13);
  }
  SECTION("a bad table is refused with the key named") {
    CHECK_THROWS_WITH(load_hooks("[[hooks]]\nplugin = \"grad_clip\"\n"),
                      Catch::Contains("max_norm") && Catch::Contains("value"));
    CHECK_THROWS_WITH(load_hooks("[[hooks]]\nplugin = \"grad_clip\"\nmax_nrom = 1.0\n"),
                      Catch::Contains("max_norm"));
  }
}

// ---- lr_schedule --------------------------------------------------------------------------

namespace {
// The lr each optimizer step used, read in the optimizer_step chain just before the step.
std::vector<double> lrs_used(const std::string& schedule_toml, std::int64_t batches,
                             std::int64_t epochs = 1, const std::string& extra = "",
                             std::int64_t max_steps = 0) {
  auto o = options(4, epochs);
  o.max_steps = max_steps;
  Trainer t(o, std::make_shared<LinearTask>(4 * batches), optimizer("sgd", 0.1));
  for (auto& h : load_hooks(extra + "[[hooks]]\nplugin = \"lr_schedule\"\n" + schedule_toml))
    t.add_hook(std::move(h));
  auto probe = std::make_shared<Probe>();
  std::vector<double> lrs;
  probe->stage_fn = [&](Context& c, Stage s) {
    if (s == Stage::optimizer_step)
      lrs.push_back(c.optimizer().param_groups()[0].options().get_lr());
  };
  t.add_hook(entry(probe, "probe", 100));  // after grad_accum: only real steps
  REQUIRE(t.fit().status == FitResult::Status::completed);
  return lrs;
}
}  // namespace

TEST_CASE("lr_schedule: each kind matches its formula", "[techniques][lr_schedule]") {
  const double pi = std::acos(-1.0);
  SECTION("constant with warm-up") {
    auto lr = lrs_used("kind = \"constant\"\nwarmup_steps = 4\n", 10);
    REQUIRE(lr.size() == 10);
    CHECK(lr[0] == Approx(0.025));
    CHECK(lr[1] == Approx(0.05));
    CHECK(lr[3] == Approx(0.1));
    CHECK(lr[9] == Approx(0.1));
  }
  SECTION("linear to 0 over 20 steps") {
    auto lr = lrs_used("kind = \"linear\"\ntotal_steps = 20\n", 20);
    REQUIRE(lr.size() == 20);
    CHECK(lr[0] == Approx(0.1));
    CHECK(lr[5] == Approx(0.075));
    CHECK(lr[10] == Approx(0.05));
    CHECK(lr[19] == Approx(0.005));
  }
  SECTION("cosine with warm-up and min_lr") {
    auto lr =
        lrs_used("kind = \"cosine\"\nwarmup_steps = 5\ntotal_steps = 20\nmin_lr = 0.01\n", 20);
    CHECK(lr[2] == Approx(0.06));
    CHECK(lr[5] == Approx(0.1));
    CHECK(lr[10] == Approx(0.0775));  // p = 1/3: 0.01 + 0.09 * (1 + 0.5) / 2
    CHECK(lr[19] == Approx(0.01 + 0.09 * (1 + std::cos(pi * 14.0 / 15.0)) / 2));
  }
  SECTION("step decay") {
    auto lr = lrs_used("kind = \"step\"\nstep_size = 5\ngamma = 0.5\n", 15);
    CHECK(lr[4] == Approx(0.1));
    CHECK(lr[5] == Approx(0.05));
    CHECK(lr[12] == Approx(0.025));
  }
  SECTION("onecycle") {
    // As PyTorch's OneCycleLR: up from 0.1 / 25 to the peak at step 0.3 * 20 - 1 = 5, then
    // down to 0.004 / 1e4 at the last step, 19, each half a cosine.
    auto lr = lrs_used("kind = \"onecycle\"\ntotal_steps = 20\n", 20);
    REQUIRE(lr.size() == 20);
    CHECK(lr[0] == Approx(0.004));
    CHECK(lr[3] == Approx(0.1 + (0.004 - 0.1) * (1 + std::cos(pi * 3 / 5)) / 2));
    CHECK(lr[5] == Approx(0.1));
    CHECK(lr[12] == Approx((0.1 + 0.004e-4) / 2));  // half way down
    CHECK(lr[19] == Approx(0.004e-4));
  }
  SECTION("total steps derived from epochs, batches and accumulation; only real steps count") {
    // 2 epochs of 10 batches with 2 micro-batches per step: 10 steps in all.
    auto lr =
        lrs_used("kind = \"linear\"\n", 10, 2, "[[hooks]]\nplugin = \"grad_accum\"\nsteps = 2\n");
    REQUIRE(lr.size() == 10);
    CHECK(lr[1] == Approx(0.09));
    CHECK(lr[5] == Approx(0.05));
    CHECK(lr[9] == Approx(0.01));
  }
  SECTION("a warm-up as long as the run: the lr still rising at its end, and said so") {
    std::vector<double> lr;
    std::string out, err;
    wick::test::capturing([&] { lr = lrs_used("kind = \"cosine\"\nwarmup_steps = 12\n", 10); }, out,
                          err);
    REQUIRE(lr.size() == 10);
    CHECK(lr[0] == Approx(0.1 / 12));
    CHECK(lr[9] == Approx(1.0 / 12));
    CHECK_THAT(err, Catch::Contains("wick: warning: hooks.lr_schedule.warmup_steps = 12 is not "
                                    "below the run's 10 optimizer steps: the lr is still warming "
                                    "up when training ends; lower warmup_steps\n"));
  }
  SECTION("more epochs than steps can count: the length is max_steps") {
    auto lr = lrs_used("kind = \"linear\"\n", 10, std::numeric_limits<std::int64_t>::max(), "", 6);
    REQUIRE(lr.size() == 6);
    CHECK(lr[0] == Approx(0.1));
    CHECK(lr[5] == Approx(0.1 / 6));
  }
  SECTION("a min_lr above the lr it decays from is refused when the fit starts") {
    Trainer t(options(4, 1), std::make_shared<LinearTask>(8), optimizer("sgd", 0.1));
    for (auto& h :
         load_hooks("[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosine\"\nmin_lr = 0.5\n"))
      t.add_hook(std::move(h));
    const auto r = t.fit();
    CHECK(r.status == FitResult::Status::failed);
    CHECK_THAT(r.error, Catch::Contains("hooks.lr_schedule.min_lr = 0.5 is above the lr 0.1 of "
                                        "optimizer 'optimizer' (group 0) that it decays from"));
  }
  SECTION("bad values are refused") {
    CHECK_THROWS_WITH(load_hooks("[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosin\"\n"),
                      Catch::Contains("cosine"));
    CHECK_THROWS_WITH(load_hooks("[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"step\"\n"),
                      Catch::Contains("step_size"));
  }
}

// ---- ema ----------------------------------------------------------------------------------

TEST_CASE("ema: shadow follows the recurrence, validates with it, swaps back",
          "[techniques][ema]") {
  using Case = std::pair<std::int64_t, bool>;
  for (auto [every, warmup] : std::vector<Case>{{1, false}, {2, false}, {1, true}}) {
    DYNAMIC_SECTION("every = " << every << ", warmup = " << warmup) {
      const double decay = 0.6;
      Trainer t(options(8), std::make_shared<LinearTask>(40, 16), optimizer("sgd", 0.1));
      auto hooks =
          load_hooks("[[hooks]]\nplugin = \"ema\"\ndecay = 0.6\nevery = " + std::to_string(every) +
                     "\nwarmup = " + (warmup ? "true" : "false") + "\n");
      auto ema = hooks[0];
      t.add_hook(std::move(hooks[0]));
      std::vector<std::vector<at::Tensor>> after;  // parameters after each optimizer step
      std::vector<at::Tensor> seen_in_valid;
      auto probe = std::make_shared<Probe>();
      probe->stages = false;
      probe->points[Point::after_step] = [&](Context& c) {
        if (c.state().training())
          after.push_back(params_of(c.model()));
        else if (seen_in_valid.empty())
          seen_in_valid = params_of(c.model());
      };
      t.add_hook(entry(probe, "probe", 50));
      auto p0 = params_of(t);
      REQUIRE(t.fit().status == FitResult::Status::completed);
      REQUIRE(after.size() == 5);

      std::vector<at::Tensor> s = p0;
      std::int64_t updates = 0;
      for (std::size_t k = 0; k < after.size(); ++k)
        if ((k + 1) % static_cast<std::size_t>(every) == 0) {
          // With warm-up: d = 1/10, 2/11, 3/12, ... (below 0.6 for the first 13 updates).
          const double n = static_cast<double>(updates);
          const double d = warmup ? std::min(decay, (1 + n) / (10 + n)) : decay;
          for (std::size_t i = 0; i < s.size(); ++i) s[i] = d * s[i] + (1 - d) * after[k][i];
          ++updates;
        }
      auto st = state_of(ema);
      CHECK(st.get_int("updates") == updates);
      std::vector<at::Tensor> shadow;
      for (std::size_t i = 0; i < s.size(); ++i)
        shadow.push_back(st.get_tensor("shadow." + std::to_string(i)));
      CHECK(max_diff(shadow, s) < 1e-6);
      CHECK(max_diff(seen_in_valid, s) < 1e-6);            // validation saw the shadow weights
      CHECK(max_diff(params_of(t), after.back()) < 1e-7);  // and training weights came back
      CHECK(max_diff(s, after.back()) > 1e-4);
    }
  }
}

TEST_CASE("ema: a validate() before fit does not undo training", "[techniques][ema]") {
  auto run = [](bool validate_first) {
    Trainer t(options(8), std::make_shared<LinearTask>(40, 16), optimizer("sgd", 0.1));
    for (auto& h : load_hooks("[[hooks]]\nplugin = \"ema\"\ndecay = 0.5\n"))
      t.add_hook(std::move(h));
    if (validate_first) t.validate();
    REQUIRE(t.fit().status == FitResult::Status::completed);
    return params_of(t);
  };
  CHECK(max_diff(run(true), run(false)) < 1e-7);
}

// ---- early_stopping -----------------------------------------------------------------------

namespace {
// Validation losses set per epoch.
class ScriptedValid : public LinearTask {
 public:
  explicit ScriptedValid(std::vector<double> losses)
      : LinearTask(8, 4), losses_(std::move(losses)) {}
  Output loss(Context& c, const at::Tensor& pred, const Batch& b) override {
    Output o = LinearTask::loss(c, pred, b);
    if (c.state().validating())
      o.loss = torch::tensor(losses_.at(static_cast<std::size_t>(calls_++)));
    return o;
  }

 private:
  std::vector<double> losses_;
  int calls_ = 0;
};
}  // namespace

TEST_CASE("early_stopping: stops after patience epochs without improvement, state resumes",
          "[techniques][early_stopping]") {
  const std::string toml =
      "[[hooks]]\nplugin = \"early_stopping\"\npatience = 2\nmin_delta = 0.01\n";
  SECTION("stops") {
    // best 0.5 at epoch 1; 0.495 is not better by min_delta; 0.7 is worse: stop after epoch 3.
    Trainer t(options(8, 10),
              std::make_shared<ScriptedValid>(std::vector<double>{1, 0.5, 0.495, 0.7, 0.1, 0.1}));
    auto hooks = load_hooks(toml);
    auto es = hooks[0];
    t.add_hook(std::move(hooks[0]));
    auto res = t.fit();
    CHECK(res.status == FitResult::Status::completed);
    CHECK(t.state().epoch == 3);
    CHECK_THAT(res.stop_reason, Catch::Contains("early_stopping") && Catch::Contains("valid/loss"));
    auto st = state_of(es);
    CHECK(st.get_float("best") == Approx(0.5));
    CHECK(st.get_int("best_epoch") == 1);
    CHECK(st.get_int("wait") == 2);
  }
  SECTION("a resumed counter keeps its patience") {
    Trainer a(options(8, 2), std::make_shared<ScriptedValid>(std::vector<double>{0.5, 0.6}));
    auto ha = load_hooks(toml);
    auto es_a = ha[0];
    a.add_hook(std::move(ha[0]));
    a.fit();
    auto saved = state_of(es_a);
    CHECK(saved.get_int("wait") == 1);
    // One more bad epoch is enough after the resume.
    Trainer b(options(8, 5), std::make_shared<ScriptedValid>(std::vector<double>{0.6, 0.1, 0.1}));
    auto hb = load_hooks(toml);
    hb[0].hook->load_state(saved);
    b.add_hook(std::move(hb[0]));
    auto res = b.fit();
    CHECK(b.state().epoch == 0);
    CHECK_THAT(res.stop_reason, Catch::Contains("best 0.5 at epoch 0"));
  }
  SECTION("mode = max") {
    // best 0.5 at epoch 1; 0.505 is not better by min_delta, 0.3 is worse: stop after epoch 3.
    Trainer t(options(8, 10),
              std::make_shared<ScriptedValid>(std::vector<double>{0.1, 0.5, 0.505, 0.3, 0.9, 0.9}));
    for (auto& h : load_hooks(toml + "mode = \"max\"\n")) t.add_hook(std::move(h));
    auto res = t.fit();
    CHECK(t.state().epoch == 3);
    CHECK_THAT(res.stop_reason, Catch::Contains("best 0.5 at epoch 1"));
  }
  SECTION("a missing metric names the keys there are") {
    Trainer t(options(8, 2), std::make_shared<LinearTask>(8));  // no validation data
    for (auto& h : load_hooks(toml)) t.add_hook(std::move(h));
    auto res = t.fit();
    CHECK(res.status == FitResult::Status::failed);
    CHECK_THAT(res.error, Catch::Contains("valid/loss") && Catch::Contains("train/loss"));
  }
}

// ---- mixed_precision ----------------------------------------------------------------------

TEST_CASE("LossScaler: skip and back off on inf, grow after the interval", "[techniques][amp]") {
  amp::LossScaler s(1024, 2.0, 0.5, 3);
  auto g1 = torch::full({3}, 2048.0), g2 = torch::full({2}, 512.0);
  CHECK_FALSE(s.unscale_({g1, g2}).item<bool>());
  CHECK(g1[0].item<double>() == 2.0);
  CHECK(g2[1].item<double>() == 0.5);
  auto bad = torch::tensor({1.0, std::numeric_limits<double>::infinity()});
  CHECK(s.unscale_({g1, bad}).item<bool>());
  auto nan = torch::tensor({std::nan("")});
  CHECK(s.unscale_({nan}).item<bool>());
  auto pos = torch::tensor({INFINITY}), neg = torch::tensor({-INFINITY});
  CHECK(s.unscale_({pos, neg}).item<bool>());  // opposite infs in different gradients
  // Large but finite float32 values are not mistaken for an overflow.
  // (a float32 sum of these would overflow to inf).
  amp::LossScaler unit(1.0, 2.0, 0.5, 3);
  auto big = torch::full({4}, 3e38);
  CHECK(big.sum().item<float>() == INFINITY);
  CHECK_FALSE(unit.unscale_({big}).item<bool>());
  s.update(false);
  CHECK(s.growth_tracker() == 1);
  s.update(true);
  CHECK(s.scale() == 512);
  CHECK(s.growth_tracker() == 0);
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 512);
  s.update(false);
  CHECK(s.scale() == 1024);
  CHECK(s.growth_tracker() == 0);
  CHECK(s.scale_loss(torch::tensor(0.5)).item<double>() == 512.0);
}

TEST_CASE("mixed_precision fp16: scales the loss, unscales, skips an inf step",
          "[techniques][amp]") {
  Trainer t(options(8), std::make_shared<LinearTask>(48), optimizer("sgd", 0.1));
  auto hooks = load_hooks(
      "[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"fp16\"\ninit_scale = 1024.0\n"
      "growth_interval = 3\n[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"linear\"\n");
  auto mp = hooks[0], sched = hooks[1];
  for (auto& h : hooks) t.add_hook(std::move(h));
  std::vector<at::Tensor> raw, unscaled;
  std::vector<double> scales;
  bool params_kept = false;
  std::vector<at::Tensor> before;
  auto inject = std::make_shared<Probe>();
  inject->stages = false;
  inject->points[Point::after_backward] = [&](Context& c) {
    raw.push_back(c.model().parameters()[0].grad().clone());
    scales.push_back(state_of(mp).get_float("scale"));
    before = params_of(c.model());
    if (c.state().batch_idx == 1) c.model().parameters()[0].mutable_grad()[0][0] = INFINITY;
  };
  inject->points[Point::after_step] = [&](Context& c) {
    if (c.state().batch_idx == 1) params_kept = max_diff(before, params_of(c.model())) == 0;
  };
  t.add_hook(entry(inject, "inject", 50));
  auto after_unscale = std::make_shared<Probe>();
  after_unscale->stage_fn = [&](Context& c, Stage s) {
    if (s == Stage::optimizer_step) unscaled.push_back(c.model().parameters()[0].grad().clone());
  };
  t.add_hook(entry(after_unscale, "after_unscale", -4));  // right after mixed_precision (-5)
  REQUIRE(t.fit().status == FitResult::Status::completed);

  // 6 batches: 0 ok, 1 inf (skipped, scale 512), 2 3 4 ok (grows back to 1024), 5 ok.
  CHECK(t.state().optimizer_step == 5);
  CHECK(t.state().skipped_steps == 1);
  CHECK(params_kept);
  REQUIRE(scales.size() == 6);
  CHECK(scales[0] == 1024);
  CHECK(scales[2] == 512);
  CHECK(scales[5] == 1024);
  auto st = state_of(mp);
  CHECK(st.get_float("scale") == 1024);
  CHECK(st.get_int("growth_tracker") == 1);
  // The schedule advanced on the 5 real steps only.
  CHECK(state_of(sched).get_int("steps") == 5);
  // Gradients arrive scaled and leave the handler unscaled (batch 0: scale 1024).
  REQUIRE(unscaled.size() == 5);
  CHECK((unscaled[0] * 1024 - raw[0]).abs().max().item<double>() < 1e-3);
  CHECK(raw[0].abs().max().item<double>() > 10);
}

TEST_CASE("mixed_precision fp16 with accumulation: an inf in a window skips the whole window",
          "[techniques][amp]") {
  auto task = std::make_shared<LinearTask>(64);
  OptimizerOptions sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.lr = 0.5;
  Trainer t(options(8), task, sgd);
  auto hooks = load_hooks(
      "[[hooks]]\nplugin = \"grad_accum\"\nsteps = 4\n"
      "[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"fp16\"\ninit_scale = 4096.0\n");
  auto mp = hooks[1];
  for (auto& h : hooks) t.add_hook(std::move(h));
  auto inject = std::make_shared<Probe>();
  inject->stages = false;
  inject->points[Point::after_backward] = [](Context& c) {
    if (c.state().batch_idx == 1) c.model().parameters()[1].mutable_grad()[0] = NAN;
  };
  t.add_hook(entry(inject, "inject", 50));
  auto p0 = params_of(t);
  REQUIRE(t.fit().status == FitResult::Status::completed);
  CHECK(t.state().optimizer_step == 1);
  CHECK(t.state().skipped_steps == 1);
  CHECK(state_of(mp).get_float("scale") == 2048);
  // The second window alone moved the parameters: its gradients started from zero and were
  // unscaled exactly once.
  auto x = task->x_.slice(0, 32, 64), y = task->y_.slice(0, 32, 64);
  auto [gw, gb] = mse_grad(p0[0], p0[1], x, y);
  auto p1 = params_of(t);
  CHECK((p1[0] - (p0[0] - 0.5 * gw)).abs().max().item<double>() < 1e-6);
  CHECK((p1[1] - (p0[1] - 0.5 * gb)).abs().max().item<double>() < 1e-6);
}

TEST_CASE("mixed_precision bf16: matmul outputs are bf16 under the hook, fp32 after",
          "[techniques][amp]") {
  auto task = std::make_shared<LinearTask>(64, 16);
  std::vector<at::ScalarType> train_dtypes, eval_dtypes;
  task->on_forward = [&](Context& c, const at::Tensor& pred) {
    (c.state().training() ? train_dtypes : eval_dtypes).push_back(pred.scalar_type());
  };
  Trainer t(options(16, 2), task, optimizer("adam", 0.05));
  for (auto& h : load_hooks("[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"bf16\"\n"))
    t.add_hook(std::move(h));
  bool autocast_outside = false;
  auto probe = std::make_shared<Probe>();
  probe->stage_fn = [&](Context&, Stage) {
    autocast_outside |= wick::compat::autocast_enabled(c10::DeviceType::CPU);
  };
  t.add_hook(entry(probe, "probe", 50));
  const double loss0 = t.validate().values.at(0).second;
  REQUIRE(t.fit().status == FitResult::Status::completed);
  REQUIRE(train_dtypes.size() == 8);
  for (auto d : train_dtypes) CHECK(d == at::kBFloat16);
  REQUIRE_FALSE(eval_dtypes.empty());
  CHECK(eval_dtypes.back() == at::kBFloat16);
  CHECK_FALSE(autocast_outside);
  CHECK_FALSE(wick::compat::autocast_enabled(c10::DeviceType::CPU));
  // The parameters stay fp32 and training still works.
  CHECK(t.model().parameters()[0].scalar_type() == at::kFloat);
  CHECK(t.validate().values.at(0).second < loss0);
  // Without the hook, the same forward is fp32.
  CHECK(task->forward(t.context(), {task->x_.slice(0, 0, 2), task->y_.slice(0, 0, 2)})
            .scalar_type() == at::kFloat);
}

TEST_CASE("wick::AutocastScope: bf16 while it lives, nested scopes restore what they found",
          "[techniques][amp]") {
  using wick::compat::autocast_dtype;
  using wick::compat::autocast_enabled;
  const auto cpu = c10::DeviceType::CPU;
  const auto dtype_before = autocast_dtype(cpu);
  REQUIRE_FALSE(autocast_enabled(cpu));
  // A weight is cast once while the outermost scope lives: an in-place update (a step's) shows
  // in the products only after it ends.
  auto w = torch::ones({8, 3}).requires_grad_();
  const auto x = torch::ones({1, 8});
  const auto sum_of_product = [&] { return at::mm(x, w).sum().item<double>(); };
  {
    const wick::AutocastScope outer(cpu, at::kBFloat16);
    CHECK(autocast_enabled(cpu));
    CHECK(at::mm(x, w).scalar_type() == at::kBFloat16);
    CHECK(sum_of_product() == 24);
    {
      const wick::AutocastScope inner(cpu, at::kBFloat16);
      torch::NoGradGuard no_grad;
      w.mul_(2);
      CHECK(sum_of_product() == 24);  // the outer scope's cast
    }
    CHECK(autocast_enabled(cpu));   // as the inner scope found it
    CHECK(sum_of_product() == 24);  // only the outermost scope drops the casts
#if TORCH_VERSION_MAJOR >= 2        // LibTorch 1.13's CPU autocast refuses any dtype but bf16
    {
      const wick::AutocastScope fp16(cpu, at::kHalf);
      CHECK(autocast_dtype(cpu) == at::kHalf);
    }
    CHECK(autocast_dtype(cpu) == at::kBFloat16);
#endif
  }
  CHECK_FALSE(autocast_enabled(cpu));
  CHECK(autocast_dtype(cpu) == dtype_before);
  CHECK(at::mm(x, w).scalar_type() == at::kFloat);
  const wick::AutocastScope scope(cpu, at::kBFloat16);
  CHECK(sum_of_product() == 48);
}

TEST_CASE("mixed_precision float_prediction = false: the loss gets the bf16 prediction itself",
          "[techniques][amp]") {
  // LinearTask's loss casts to float itself, so both ways train alike, bit for bit; only the
  // dtype that hooks and the loss see differs.
  auto run = [](const std::string& extra) {
    auto task = std::make_shared<LinearTask>(64, 16);
    Trainer t(options(16, 2), task, optimizer("adam", 0.05));
    for (auto& h :
         load_hooks("[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"bf16\"\n" + extra))
      t.add_hook(std::move(h));
    std::vector<at::ScalarType> seen;
    auto probe = std::make_shared<Probe>();
    probe->stages = false;
    probe->points[Point::after_pred] = [&](Context& c) {
      seen.push_back(c.output().pred.scalar_type());
    };
    t.add_hook(entry(probe, "probe", 50));
    REQUIRE(t.fit().status == FitResult::Status::completed);
    REQUIRE_FALSE(seen.empty());
    return std::make_pair(seen.front(), t.model().parameters()[0].clone());
  };
  const auto [cast, w_cast] = run("");
  const auto [kept, w_kept] = run("float_prediction = false\n");
  CHECK(cast == at::kFloat);
  CHECK(kept == at::kBFloat16);
  CHECK(torch::equal(w_cast, w_kept));
}

// ---- checkpoint state ---------------------------------------------------------------------

TEST_CASE("hook state carries schedule, EMA, scaler and patience across a resume",
          "[techniques][state]") {
  const std::string toml =
      "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosine\"\nwarmup_steps = 2\n"
      "[[hooks]]\nplugin = \"ema\"\ndecay = 0.8\n"
      "[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"fp16\"\ninit_scale = 256.0\n"
      "growth_interval = 3\n"
      "[[hooks]]\nplugin = \"early_stopping\"\npatience = 5\n";
  OptimizerOptions sgd;  // no momentum: the optimizer itself has no state to carry
  sgd.kind = OptimizerKind::sgd;
  sgd.lr = 0.1;
  auto states = [](const std::vector<HookEntry>& hooks) {
    std::map<std::string, StateDict> out;
    for (const auto& h : hooks)
      if (h.hook->has_state()) out[h.instance] = state_of(h);
    return out;
  };

  // The whole run: 2 epochs of 5 steps.
  Trainer full(options(8, 2), std::make_shared<LinearTask>(40, 16), sgd);
  auto full_hooks = load_hooks(toml);
  for (auto& h : full_hooks) full.add_hook(h);
  REQUIRE(full.fit().status == FitResult::Status::completed);

  // The same run stopped after its first epoch...
  Trainer first(options(8, 2), std::make_shared<LinearTask>(40, 16), sgd);
  auto first_hooks = load_hooks(toml);
  for (auto& h : first_hooks) first.add_hook(h);
  // The framework's snapshot of the run at the epoch's end (model, counters, every hook's
  // state), taken before the stop is asked for, as a periodic checkpoint is...
  TempDir tmp;
  const auto ckpt = (tmp / "ckpt").string();
  auto stopper = std::make_shared<Probe>();
  stopper->stages = false;
  stopper->points[Point::after_epoch] = [&](Context& c) {
    c.save_checkpoint(ckpt, "test");
    c.request_stop("test");
  };
  first.add_hook(entry(stopper, "stopper", 100));
  REQUIRE(first.fit().status == FitResult::Status::completed);
  REQUIRE(first.state().optimizer_step == 5);
  auto saved = states(first_hooks);
  CHECK(saved.size() == 4);

  // ...restored in a fresh trainer with fresh hooks.
  Trainer second(options(8, 2), std::make_shared<LinearTask>(40, 16), sgd);
  auto second_hooks = load_hooks(toml);
  for (auto& h : second_hooks) second.add_hook(h);
  restore_at_start(second, ckpt);
  REQUIRE(second.fit().status == FitResult::Status::completed);

  CHECK(max_diff(params_of(second), params_of(full)) < 1e-6);
  auto a = states(full_hooks), b = states(second_hooks);
  CHECK(b.at("lr_schedule").get_int("steps") == 10);
  CHECK(b.at("lr_schedule").get_int("steps") == a.at("lr_schedule").get_int("steps"));
  CHECK(second.optimizer().param_groups()[0].options().get_lr() ==
        Approx(full.optimizer().param_groups()[0].options().get_lr()));
  CHECK(b.at("ema").get_int("updates") == 10);
  CHECK((b.at("ema").get_tensor("shadow.0") - a.at("ema").get_tensor("shadow.0"))
            .abs()
            .max()
            .item<double>() < 1e-6);
  // 10 finite steps with growth every 3: 256 -> 2048, 1 step into the next interval.
  CHECK(b.at("mixed_precision").get_float("scale") == 2048);
  CHECK(b.at("mixed_precision").get_int("growth_tracker") == 1);
  CHECK(b.at("mixed_precision").get_float("scale") == a.at("mixed_precision").get_float("scale"));
  CHECK(b.at("early_stopping").get_float("best") == a.at("early_stopping").get_float("best"));
  CHECK(b.at("early_stopping").get_int("best_epoch") ==
        a.at("early_stopping").get_int("best_epoch"));
}

namespace {

// A cosine schedule (2 steps of warm-up, base lr 0.1) on 40 samples, stopped by `stopped`'s
// max_steps and resumed as `resumed`: the lr of each step the resumed fit takes, its notes.
struct Resumed {
  std::vector<double> lrs;
  std::string err;
  std::int64_t steps = 0;
};
Resumed resume_cosine(const TrainerOptions& stopped, const TrainerOptions& resumed) {
  const std::string toml =
      "[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"cosine\"\nwarmup_steps = 2\n";
  Trainer first(stopped, std::make_shared<LinearTask>(40, 16), optimizer("sgd", 0.1));
  for (auto& h : load_hooks(toml)) first.add_hook(std::move(h));
  REQUIRE(first.fit().status == FitResult::Status::completed);
  REQUIRE(first.state().optimizer_step == stopped.max_steps);
  TempDir tmp;
  const auto ckpt = (tmp / "ckpt").string();
  first.context().save_checkpoint(ckpt, "test");

  Trainer second(resumed, std::make_shared<LinearTask>(40, 16), optimizer("sgd", 0.1));
  for (auto& h : load_hooks(toml)) second.add_hook(std::move(h));
  Resumed out;
  auto probe = std::make_shared<Probe>();
  probe->stage_fn = [&](Context& c, Stage st) {
    if (st == Stage::optimizer_step)
      out.lrs.push_back(c.optimizer().param_groups()[0].options().get_lr());
  };
  second.add_hook(entry(probe, "probe", 100));
  restore_at_start(second, ckpt);
  std::string stdout_text;
  wick::test::capturing([&] { REQUIRE(second.fit().status == FitResult::Status::completed); },
                        stdout_text, out.err);
  out.steps = second.state().optimizer_step;
  return out;
}

// The lr of step t of a cosine over `total` steps after 2 of warm-up, from 0.1.
double cosine_lr(std::int64_t t, std::int64_t total) {
  const double pi = std::acos(-1.0);
  return 0.1 * (1 + std::cos(pi * static_cast<double>(t - 2) / static_cast<double>(total - 2))) / 2;
}

}  // namespace

TEST_CASE("lr_schedule resumed into a longer run spans the new length, saying so",
          "[techniques][lr_schedule]") {
  // Stopped by max_steps = 5 (its derived length: 5), then resumed for 2 epochs of 5 steps.
  auto stopped = options(8, 2);
  stopped.max_steps = 5;
  const auto r = resume_cosine(stopped, options(8, 2));
  // Steps 5..9 of a cosine over 10 (the checkpoint's length: lr 0 on each).
  REQUIRE(r.lrs.size() == 5);
  for (std::size_t k = 0; k < r.lrs.size(); ++k) {
    INFO("step " << 5 + k);
    CHECK(r.lrs[k] == Approx(cosine_lr(5 + static_cast<std::int64_t>(k), 10)));
  }
  CHECK_THAT(r.err, Catch::Contains("wick: note: hooks.lr_schedule spans 10 optimizer steps in "
                                    "this run, 5 in the checkpoint's; it goes on from step 5 of "
                                    "the new length"));
}

TEST_CASE("lr_schedule resumed at another batch size spans the steps the run takes",
          "[techniques][lr_schedule]") {
  // 2 epochs of 40 samples at batch 8 (5 steps an epoch), stopped by max_steps, resumed at
  // batch 4 (10 steps an epoch).
  struct Case {
    std::int64_t stop, total;
  };
  // Mid-epoch 0 after 3 steps: its rest (16 samples) is 4 batches, epoch 1 is 10: 3 + 4 + 10
  // (the resumed epoch's 3 + 4 batches twice would be 14). At epoch 0's end: 5 + 10 (epochs x
  // the new 10 would be 20).
  for (const auto c : {Case{3, 17}, Case{5, 15}}) {
    DYNAMIC_SECTION("stopped after step " << c.stop) {
      auto stopped = options(8, 2);
      stopped.max_steps = c.stop;
      const auto r = resume_cosine(stopped, options(4, 2));
      CHECK(r.steps == c.total);
      // The last step's lr is near 0, not 0 for steps before it.
      REQUIRE(r.lrs.size() == static_cast<std::size_t>(c.total - c.stop));
      for (std::size_t k = 0; k < r.lrs.size(); ++k) {
        INFO("step " << c.stop + static_cast<std::int64_t>(k));
        CHECK(r.lrs[k] == Approx(cosine_lr(c.stop + static_cast<std::int64_t>(k), c.total)));
      }
      CHECK(r.lrs.back() > 0);
      CHECK_THAT(r.err,
                 Catch::Contains("wick: note: hooks.lr_schedule spans " + std::to_string(c.total) +
                                 " optimizer steps in this run, " + std::to_string(c.stop) +
                                 " in the checkpoint's; it goes on from step " +
                                 std::to_string(c.stop) + " of the new length"));
    }
  }
}

TEST_CASE(
    "a hook cannot log a value under a record's own fields or the trainer's, nor without "
    "a name, nor a tensor of several values or none (meta) or a complex one",
    "[techniques][records]") {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"step",
       "'step' is a field of every metrics record (kind, epoch, step, samples_seen, "
       "time_s)"},
      {"", "a value needs a name"},
      {"valid/loss",
       "'valid/loss' is the trainer's own measurement, which the value would "
       "replace"},
      {"train/loss", "'train/loss' is the trainer's own measurement"},
      {"vector", "Context::log(\"vector\", tensor): the tensor has 3 elements; log one value"},
      {"meta", "Context::log(\"meta\", tensor): a meta tensor holds no value"},
      {"complex", "Context::log(\"complex\", tensor): a complex value is not one number"}};
  for (const auto& [key, message] : cases) {
    DYNAMIC_SECTION("'" << key << "'") {
      Trainer t(options(4), std::make_shared<LinearTask>(8), optimizer("sgd", 0.1));
      auto probe = std::make_shared<Probe>();
      probe->stages = false;
      probe->points[Point::after_step] = [key = key](Context& c) {
        if (key == "vector")
          c.log(key, torch::ones({3}));
        else if (key == "meta")
          c.log(key, torch::ones({}, torch::device(torch::kMeta)));
        else if (key == "complex")
          c.log(key, torch::ones({}, torch::kComplexFloat));
        else
          c.log(key, 1.0);
      };
      t.add_hook(entry(probe, "probe", 0));
      const auto r = t.fit();
      CHECK(r.status == FitResult::Status::failed);
      CHECK_THAT(r.error, Catch::Contains("(instance 'probe') at after_step: Context::log"));
      CHECK_THAT(r.error, Catch::Contains(message));
    }
  }
}

TEST_CASE("a Trainer runs one fit: a second fit() is refused, the first's results kept",
          "[techniques]") {
  Trainer t(options(4, 1), std::make_shared<LinearTask>(8), optimizer("sgd", 0.1));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  const auto steps = t.state().optimizer_step;
  CHECK_THROWS_WITH(t.fit(), Catch::Contains("fit() called a second time on one Trainer"));
  CHECK(t.state().optimizer_step == steps);
}

TEST_CASE("a hook that throws at after_cancel keeps no later one from its clean-up",
          "[techniques]") {
  // A cancel checkpoint or a file's close after the thrower still runs; its error is reported.
  Trainer t(options(4, 2), std::make_shared<LinearTask>(8), optimizer("sgd", 0.1));
  auto hook = [](Point p, std::function<void(Context&)> fn) {
    auto probe = std::make_shared<Probe>();
    probe->stages = false;
    probe->points[p] = std::move(fn);
    return probe;
  };
  std::vector<std::string> ran;
  t.add_hook(entry(hook(Point::after_step, [](Context&) { throw CancelFit{}; }), "canceller", 0));
  t.add_hook(entry(hook(Point::after_cancel,
                        [&](Context&) {
                          ran.push_back("thrower");
                          throw std::runtime_error("cleanup failed");
                        }),
                   "thrower", -200));
  t.add_hook(
      entry(hook(Point::after_cancel, [&](Context&) { ran.push_back("later"); }), "later", 10));
  const auto r = t.fit();
  CHECK(r.status == FitResult::Status::failed);
  CHECK(ran == std::vector<std::string>{"thrower", "later"});
  CHECK_THAT(r.error, Catch::Contains("(instance 'thrower') at after_cancel: cleanup failed"));
}

TEST_CASE("CancelStep after next() stepped the optimizer fails the fit: the step is taken",
          "[techniques]") {
  struct Late : Hook {
    void connect(Registrar& r) override {
      r.stage(Stage::optimizer_step, [](Context& c, Next next) {
        const bool stepped = next();
        if (c.state().micro_step == 2) throw CancelStep{};
        return stepped;
      });
    }
  };
  Trainer t(options(4), std::make_shared<LinearTask>(16), optimizer("sgd", 0.1));
  t.add_hook(entry(std::make_shared<Late>(), "late", 0));
  const auto r = t.fit();
  CHECK(r.status == FitResult::Status::failed);
  CHECK_THAT(r.error, Catch::Contains("(instance 'late') at optimizer_step: CancelStep thrown "
                                      "after next() stepped the optimizer"));
}

TEST_CASE("a stage handler that calls next() twice is stopped, not stepped twice", "[techniques]") {
  struct Twice : Hook {
    void connect(Registrar& r) override {
      r.stage(Stage::optimizer_step, [](Context&, Next next) {
        next();
        return next();
      });
    }
  };
  Trainer t(options(4), std::make_shared<LinearTask>(8), optimizer("sgd", 0.1));
  t.add_hook(entry(std::make_shared<Twice>(), "twice", 0));
  const auto r = t.fit();
  CHECK(r.status == FitResult::Status::failed);
  CHECK(t.state().optimizer_step == 0);
  CHECK_THAT(r.error, Catch::Contains("(instance 'twice') at optimizer_step: a stage handler "
                                      "called next() twice in one run of its stage"));
}

TEST_CASE("a model that registers one tensor under two names is refused, naming both",
          "[techniques]") {
  struct Twice : LinearTask {
    using LinearTask::LinearTask;
    std::shared_ptr<torch::nn::Module> model() override {
      auto m = LinearTask::model();
      m->register_parameter("again", m->named_parameters()["weight"]);
      return m;
    }
  };
  CHECK_THROWS_WITH(Trainer(options(4), std::make_shared<Twice>(8), optimizer("sgd", 0.1)),
                    Catch::Contains("the model's parameters 'weight' and 'again' are one tensor, "
                                    "which the optimizer would step twice"));
}

TEST_CASE("a hook whose save_state throws is named in the checkpoint's error", "[techniques]") {
  struct Unsaveable : Hook {
    void connect(Registrar&) override {}
    bool has_state() const override { return true; }
    void save_state(StateDict&) const override { throw std::runtime_error("nope"); }
    void load_state(const StateDict&) override {}
  };
  Trainer t(options(4), std::make_shared<LinearTask>(8), optimizer("sgd", 0.1));
  t.add_hook(entry(std::make_shared<Unsaveable>(), "unsaveable", 0));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  TempDir tmp;
  CHECK_THROWS_WITH(t.context().save_checkpoint((tmp / "ck").string(), "test"),
                    Catch::Contains("hook 'unsaveable' cannot save its state: nope"));
}

TEST_CASE("early_stopping says so when its metric was never a number", "[techniques]") {
  struct NanValid : LinearTask {
    using LinearTask::LinearTask;
    Output loss(Context& c, const at::Tensor& pred, const Batch& b) override {
      auto o = LinearTask::loss(c, pred, b);
      if (c.state().validating()) o.loss = o.loss * std::nan("");
      return o;
    }
  };
  Trainer t(options(4, 3), std::make_shared<NanValid>(8, 8), optimizer("sgd", 0.1));
  for (auto& h : load_hooks("[[hooks]]\nplugin = \"early_stopping\"\npatience = 1\n"))
    t.add_hook(std::move(h));
  const auto r = t.fit();
  CHECK(r.status == FitResult::Status::completed);
  CHECK(t.state().epoch == 0);  // stopped after the first epoch
  CHECK_THAT(r.stop_reason, Catch::Contains("early_stopping: valid/loss has not improved for 1 "
                                            "epochs (it was never a number"));
}

TEST_CASE("a task's loss of more than one value is refused, naming its shape", "[techniques]") {
  struct PerSample : LinearTask {
    using LinearTask::LinearTask;
    Output loss(Context&, const at::Tensor& pred, const Batch& b) override {
      Output o;
      o.loss = (pred - b.target).pow(2).mean(1);  // one value per sample, not reduced
      return o;
    }
  };
  Trainer t(options(4), std::make_shared<PerSample>(8), optimizer("sgd", 0.1));
  const auto r = t.fit();
  CHECK(r.status == FitResult::Status::failed);
  CHECK_THAT(r.error, Catch::Contains("the task's loss() returned a tensor of shape [4], not one "
                                      "value; reduce it (e.g. its .mean()) before returning"));
}

// ---- composition --------------------------------------------------------------------------

namespace {
const char* kComposed = R"(
[[hooks]]
plugin = "grad_accum"
steps = 4

[[hooks]]
plugin = "mixed_precision"
dtype = "bf16"

[[hooks]]
plugin = "grad_clip"
max_norm = 0.5

[[hooks]]
plugin = "lr_schedule"
kind = "cosine"
warmup_steps = 3

[[hooks]]
plugin = "ema"
decay = 0.9
)";

std::string composed_config(const std::string& out_dir) {
  return "[trainer]\nepochs = 3\nbatch_size = 16\nshuffle = true\nlog_every = 0\noutput_dir = \"" +
         out_dir +
         "\"\n[task]\nplugin = \"synthetic\"\nsamples = 400\nvalid_samples = 128\n"
         "[optimizer]\nname = \"adam\"\nlr = 0.01\n" +
         kComposed;
}
}  // namespace

TEST_CASE("composition: accumulation + bf16 + clipping + schedule + EMA in one run",
          "[techniques][compose]") {
  TempDir dir;
  auto cfg = Config::parse(composed_config(dir.path().string()), (dir / "c.toml").string());
  PluginFinder finder({WICK_PLUGIN_DIR});
  auto t = make_trainer(cfg, finder);
  std::vector<HookEntry> plugins(t->hooks().begin(), t->hooks().end());

  // Probes between the plugins' handlers: each records (stage, position) when reached.
  // Optimizer_step chain: p_first(-15) grad_accum(-10) p_accum(-7) mixed_precision(-5)
  // p_amp(-2) grad_clip(0) p_clip(3) lr_schedule/ema (no stage handlers) -> default.
  std::vector<std::string> trace;
  std::vector<double> norm_before, norm_after;
  auto grad_norm = [](Context& c) {
    double s = 0;
    for (const auto& p : c.model().parameters())
      if (p.grad().defined()) s += p.grad().pow(2).sum().item<double>();
    return std::sqrt(s);
  };
  std::map<std::string, std::map<Stage, int>> counts;
  for (const auto& [probe, order] : std::vector<std::pair<std::string, int>>{
           {"p_first", -15}, {"p_accum", -7}, {"p_amp", -2}, {"p_clip", 3}}) {
    const std::string name = probe;  // a structured binding cannot be captured in C++17
    auto p = std::make_shared<Probe>();
    p->stage_fn = [&, name](Context& c, Stage s) {
      ++counts[name][s];
      if (s != Stage::optimizer_step) return;
      trace.push_back(name);
      if (name == "p_amp") norm_before.push_back(grad_norm(c));
      if (name == "p_clip") norm_after.push_back(grad_norm(c));
    };
    t->add_hook(entry(p, name, order));
  }
  REQUIRE(t->fit().status == FitResult::Status::completed);

  // 25 batches per epoch: 7 windows (6 of 4 and a last of 1), 3 epochs.
  const int micro = 75, steps = 21;
  CHECK(t->state().optimizer_step == steps);
  CHECK(counts["p_first"][Stage::optimizer_step] == micro);
  CHECK(counts["p_accum"][Stage::optimizer_step] == steps);  // grad_accum declined the rest
  CHECK(counts["p_amp"][Stage::optimizer_step] == steps);    // bf16 never skips
  CHECK(counts["p_clip"][Stage::optimizer_step] == steps);   // clip ran once per real step
  CHECK(counts["p_first"][Stage::zero_grad] == micro);
  CHECK(counts["p_accum"][Stage::zero_grad] == steps);
  for (const auto& n : {"p_first", "p_accum", "p_amp", "p_clip"})
    CHECK(counts[n][Stage::backward] == micro);
  // Call order within each real step, and nothing past grad_accum on other micro-batches.
  std::string expect;
  for (int e = 0; e < 3; ++e)
    for (int w = 0; w < 7; ++w) {
      const int k = w < 6 ? 4 : 1;
      for (int i = 1; i < k; ++i) expect += "p_first ";
      expect += "p_first p_accum p_amp p_clip ";
    }
  std::string got;
  for (const auto& s : trace) got += s + " ";
  CHECK(got == expect);
  // Clipping: the norm after the clip handler is min(norm, max_norm).
  REQUIRE(norm_before.size() == static_cast<std::size_t>(steps));
  int clipped = 0;
  for (std::size_t i = 0; i < norm_before.size(); ++i) {
    CHECK(norm_after[i] == Approx(std::min(norm_before[i], 0.5)).epsilon(1e-4));
    clipped += norm_before[i] > 0.5;
  }
  CHECK(clipped > 0);
  // Schedule and EMA advanced on real steps only.
  for (const auto& h : plugins) {
    if (h.plugin == "lr_schedule") {
      CHECK(state_of(h).get_int("steps") == steps);
      CHECK(state_of(h).get_int("total_steps") == steps);
    }
    if (h.plugin == "ema") CHECK(state_of(h).get_int("updates") == steps);
  }
  // The loss went down.
  auto records = wick::test::read_jsonl(dir / "metrics.jsonl");
  REQUIRE(records.size() == 3);
  CHECK(records.back()["train/loss"].get<double>() < records.front()["train/loss"].get<double>());
  CHECK(records.back()["valid/loss"].get<double>() < records.front()["valid/loss"].get<double>());
  CHECK(records.back().contains("grad_norm"));
}

TEST_CASE("wick describe shows the composed chains", "[techniques][compose][cli]") {
  TempDir dir;
  wick::test::write_file(dir / "c.toml", composed_config((dir / "run").string()));
  auto r = wick::test::run_wick({"describe", (dir / "c.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  // bf16 needs no loss scaling: mixed_precision wraps the forward only.
  CHECK_THAT(r.out, Catch::Contains("| forward        | mixed_precision(-5) -> "
                                    "default: task.forward()"));
  CHECK_THAT(r.out, Catch::Contains("| optimizer_step | grad_accum(-10) -> grad_clip(0) -> "
                                    "default: optimizer.step()"));
  CHECK_THAT(r.out,
             Catch::Contains("| backward       | grad_accum(-10) -> default: loss.backward()"));
  CHECK_THAT(r.out, Catch::Contains(
                        "| zero_grad      | grad_accum(-10) -> default: optimizer.zero_grad()"));
  CHECK_THAT(r.out, Catch::Contains("| before_valid    | ema             |   -20 |"));
  // fp16 scales the loss in backward and unscales in optimizer_step, between the two.
  auto fp16 = wick::test::run_wick(
      {"describe", (dir / "c.toml").string(), "--set", "hooks.mixed_precision.dtype=\"fp16\""});
  INFO(fp16.err << fp16.out);
  REQUIRE(fp16.exit_code == 0);
  CHECK_THAT(fp16.out,
             Catch::Contains("| optimizer_step | grad_accum(-10) -> mixed_precision(-5) -> "
                             "grad_clip(0) -> default: optimizer.step()"));
  CHECK_THAT(fp16.out,
             Catch::Contains("| backward       | grad_accum(-10) -> mixed_precision(-5) -> "
                             "default: loss.backward()"));
}

TEST_CASE("order conflicts are refused at start with the orders to use", "[techniques][compose]") {
  SECTION("clipping before unscaling") {
    Trainer t(options(8), std::make_shared<LinearTask>(16));
    for (auto& h : load_hooks("[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"fp16\"\n"
                              "[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 1.0\norder = -8\n"))
      t.add_hook(std::move(h));
    CHECK_THROWS_WITH(t.connect(), Catch::Contains("'grad_clip' (order -8) runs before "
                                                   "'mixed_precision' (order -5)") &&
                                       Catch::Contains("unscaled") &&
                                       Catch::Contains("order = -4"));
  }
  SECTION("clipping or unscaling before accumulation") {
    Trainer t(options(8), std::make_shared<LinearTask>(16));
    for (auto& h : load_hooks("[[hooks]]\nplugin = \"grad_accum\"\nsteps = 2\n"
                              "[[hooks]]\nplugin = \"mixed_precision\"\ndtype = \"fp16\"\n"
                              "order = -12\n"))
      t.add_hook(std::move(h));
    CHECK_THROWS_WITH(t.connect(), Catch::Contains("'mixed_precision' (order -12)") &&
                                       Catch::Contains("'grad_accum' (order -10)") &&
                                       Catch::Contains("order = -9"));
  }
  SECTION("clipping before the all-reduce (ddp ordered after grad_clip)") {
    Trainer t(options(8), std::make_shared<LinearTask>(16));
    for (auto& h : load_hooks("[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 1.0\n"
                              "[[hooks]]\nplugin = \"ddp\"\norder = 3\n"))
      t.add_hook(std::move(h));
    CHECK_THROWS_WITH(t.connect(), Catch::Contains("'grad_clip' (order 0) runs before 'ddp' "
                                                   "(order 3)") &&
                                       Catch::Contains("reduced_gradients") &&
                                       Catch::Contains("order = 4"));
  }
  SECTION("through wick describe: exit 2 and the message") {
    TempDir dir;
    std::string cfg = composed_config((dir / "run").string());
    cfg.replace(cfg.find("max_norm = 0.5"), 14, "max_norm = 0.5\norder = -20");
    cfg.replace(cfg.find("dtype = \"bf16\""), 14, "dtype = \"fp16\"");
    wick::test::write_file(dir / "c.toml", cfg);
    auto r = wick::test::run_wick({"describe", (dir / "c.toml").string()});
    CHECK(r.exit_code == 2);
    // Both requirements (after grad_accum at -10, after mixed_precision at -5) are met by -4.
    CHECK_THAT(r.err, Catch::Contains("'grad_clip' (order -20) runs before 'grad_accum'") &&
                          Catch::Contains("order = -4"));
  }
}

// ---- several optimizers, parameter groups, manual optimization ----------------------------

namespace {

// Two named modules, "gen" and "disc", as a GAN has: each gets its own optimizer.
struct TwoNets : torch::nn::Module {
  TwoNets() {
    gen = register_module("gen", torch::nn::Linear(kIn, kOut));
    disc = register_module("disc", torch::nn::Linear(kOut, 1));
  }
  torch::nn::Linear gen{nullptr}, disc{nullptr};
};

// Regression through gen; in manual mode a second, adversarial-style loss trains disc alone.
class TwoNetTask : public Task {
 public:
  explicit TwoNetTask(bool manual) : manual_(manual), data_(32) {}
  std::shared_ptr<torch::nn::Module> model() override {
    net_ = std::make_shared<TwoNets>();
    return net_;
  }
  std::shared_ptr<Dataset> train_data() override { return data_.train_data(); }
  at::Tensor forward(Context&, const Batch& b) override { return net_->gen(b.input); }
  Output loss(Context&, const at::Tensor& pred, const Batch& b) override {
    Output o;
    o.loss = torch::mse_loss(pred, b.target) + 0.0 * net_->disc(pred).sum();
    return o;
  }
  bool manual_optimization() const override { return manual_; }
  Output train_step(Context& c, const Batch& b) override {
    // disc: tell real targets (1) from gen's predictions (0), gen's output detached.
    auto fake = net_->gen(b.input);
    auto d_loss = torch::mse_loss(net_->disc(b.target), torch::ones({b.target.size(0), 1})) +
                  torch::mse_loss(net_->disc(fake.detach()), torch::zeros({b.target.size(0), 1}));
    c.backward(d_loss, "disc");
    c.step("disc");
    // gen: regression; its backward also reaches disc's weights, which disc's next step must
    // not see: cleared explicitly, as a GAN's discriminator gradients are.
    auto g_loss = torch::mse_loss(fake, b.target) + 0.1 * net_->disc(fake).pow(2).mean();
    c.backward(g_loss, "gen");
    c.step("gen");
    c.zero_grad("disc");
    Output o;
    o.loss = g_loss.detach();
    o.metrics.emplace_back("d_loss", d_loss.detach());
    return o;
  }

 private:
  bool manual_;
  LinearTask data_;
  std::shared_ptr<TwoNets> net_;
};

OptimizerOptions on_module(const std::string& module, const std::string& name, double lr) {
  auto o = optimizer(name, lr);
  o.module = module;
  return o;
}

}  // namespace

TEST_CASE("parameter groups: each group gets its lr and weight decay, lr_schedule scales each",
          "[techniques][optim]") {
  auto o = optimizer("sgd", 0.1);
  ParamGroupOptions g;
  g.params = "weight";
  g.lr = 0.01;
  g.weight_decay = 0.5;
  o.groups.push_back(g);
  Trainer t(options(8, 2), std::make_shared<LinearTask>(16), o);
  // The unclaimed parameters (bias) form the first group with the optimizer's options.
  auto& groups = t.optimizer().param_groups();
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].options().get_lr() == Approx(0.1));
  CHECK(groups[1].options().get_lr() == Approx(0.01));
  CHECK(static_cast<torch::optim::SGDOptions&>(groups[1].options()).weight_decay() == 0.5);
  CHECK(groups[1].params()[0].sizes() == t.model().named_parameters()["weight"].sizes());
  // Halved every epoch: each group from its own base.
  for (auto& h : load_hooks("[[hooks]]\nplugin = \"lr_schedule\"\nkind = \"step\"\nunit = "
                            "\"epochs\"\nstep_size = 1\ngamma = 0.5\n"))
    t.add_hook(std::move(h));
  std::vector<std::pair<double, double>> seen;
  auto probe = std::make_shared<Probe>();
  probe->stages = false;
  probe->points[Point::after_epoch] = [&](Context& c) {
    seen.emplace_back(c.optimizer().param_groups()[0].options().get_lr(),
                      c.optimizer().param_groups()[1].options().get_lr());
  };
  t.add_hook(entry(probe, "probe", 50));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].first == Approx(0.1));
  CHECK(seen[0].second == Approx(0.01));
  CHECK(seen[1].first == Approx(0.05));
  CHECK(seen[1].second == Approx(0.005));

  SECTION("a glob that matches nothing, or a parameter two groups claim") {
    auto bad = optimizer("sgd", 0.1);
    ParamGroupOptions nothing;
    nothing.params = "backbone.*";
    nothing.where = "cfg.toml:9:1";
    bad.groups.push_back(nothing);
    CHECK_THROWS_WITH(Trainer(options(8), std::make_shared<LinearTask>(16), bad),
                      "cfg.toml:9:1: params = \"backbone.*\" matches no parameter of the model "
                      "(its parameters: weight, bias)");
    auto twice = optimizer("sgd", 0.1);
    ParamGroupOptions a, b;
    a.params = "*";
    a.where = "cfg.toml:9:1";
    b.params = "w*";
    b.where = "cfg.toml:12:1";
    twice.groups = {a, b};
    CHECK_THROWS_WITH(Trainer(options(8), std::make_shared<LinearTask>(16), twice),
                      "cfg.toml:12:1: parameter 'weight' matches this group's params = \"w*\" "
                      "and the group at cfg.toml:9:1; a parameter belongs to one group: make "
                      "the globs disjoint");
  }
}

TEST_CASE("several optimizers: one per module, each stage chain runs per optimizer",
          "[techniques][optim]") {
  const std::vector<OptimizerOptions> opts = {on_module("gen", "adam", 0.01),
                                              on_module("disc", "sgd", 0.1)};
  SECTION("automatic: one backward, each optimizer steps through its chain") {
    Trainer t(options(8), std::make_shared<TwoNetTask>(false), opts);
    std::vector<std::string> chain;
    auto probe = std::make_shared<Probe>();
    probe->stage_fn = [&](Context& c, Stage s) {
      if (s != Stage::backward)
        chain.push_back(std::string(to_string(s)) + " " + c.optimizer_name());
    };
    t.add_hook(entry(probe, "probe", 0));
    CHECK(t.context().optimizer_names() == std::vector<std::string>{"gen", "disc"});
    CHECK(t.context().optimizer("disc").param_groups()[0].options().get_lr() == Approx(0.1));
    REQUIRE(t.fit().status == FitResult::Status::completed);
    CHECK(t.state().optimizer_step == 4);
    REQUIRE(chain.size() == 16);
    CHECK(std::vector<std::string>(chain.begin(), chain.begin() + 4) ==
          std::vector<std::string>{"optimizer_step gen", "zero_grad gen", "optimizer_step disc",
                                   "zero_grad disc"});
  }
  SECTION("manual: the task drives backward and steps; both trained, resumed exactly") {
    auto run = [&](Trainer& t) { REQUIRE(t.fit().status == FitResult::Status::completed); };
    Trainer full(options(8, 2), std::make_shared<TwoNetTask>(true), opts);
    const auto gen0 = params_of(*full.model().named_children()["gen"]);
    const auto disc0 = params_of(*full.model().named_children()["disc"]);
    std::vector<std::string> chain;
    auto probe = std::make_shared<Probe>();
    probe->stage_fn = [&](Context& c, Stage s) {
      if (c.state().epoch == 0 && c.state().batch_idx == 0)
        chain.push_back(std::string(to_string(s)) + " " + c.optimizer_name());
    };
    full.add_hook(entry(probe, "probe", 0));
    run(full);
    CHECK(full.state().optimizer_step == 8);  // once per batch, though two optimizers stepped
    CHECK(chain == std::vector<std::string>{"backward disc", "optimizer_step disc",
                                            "zero_grad disc", "backward gen", "optimizer_step gen",
                                            "zero_grad gen", "zero_grad disc"});
    CHECK(max_diff(params_of(*full.model().named_children()["gen"]), gen0) > 1e-4);
    CHECK(max_diff(params_of(*full.model().named_children()["disc"]), disc0) > 1e-4);

    // Stopped after one epoch, checkpointed, resumed: both optimizers' states come back.
    TempDir tmp;
    Trainer first(options(8, 1), std::make_shared<TwoNetTask>(true), opts);
    run(first);
    first.context().save_checkpoint((tmp / "ckpt").string(), "test");
    Trainer second(options(8, 2), std::make_shared<TwoNetTask>(true), opts);
    restore_at_start(second, (tmp / "ckpt").string());
    run(second);
    CHECK(second.model_fingerprint() == full.model_fingerprint());
  }
  SECTION("an optimizer for a module the model lacks, and a module without one") {
    auto typo = opts;
    typo[1].module = "dics";
    typo[1].where = "cfg.toml:7:1";
    CHECK_THROWS_WITH(Trainer(options(8), std::make_shared<TwoNetTask>(false), typo),
                      "cfg.toml:7:1: [optimizers.dics] names no module of the task's model (its "
                      "modules: gen, disc); did you mean 'disc'?");
    auto missing = std::vector<OptimizerOptions>{opts[0]};
    missing[0].where = "cfg.toml:3:1";
    CHECK_THROWS_WITH(Trainer(options(8), std::make_shared<TwoNetTask>(false), missing),
                      "cfg.toml:3:1: module 'disc' has trainable parameters but no optimizer; "
                      "add an [optimizers.disc] table (or freeze it)");
  }
}

// ---- fused adam ---------------------------------------------------------------------------

TEST_CASE("fused adam and adamw: first step by hand, then torch::optim's steps",
          "[techniques][optim]") {
  auto task = std::make_shared<LinearTask>(64);
  auto run = [&](const std::string& name, bool fused, double wd, std::int64_t batch,
                 std::int64_t epochs) {
    OptimizerOptions o = optimizer(name, 0.05);
    o.fused = fused;
    o.weight_decay = wd;
    o.weight_decay_set = true;
    auto t = std::make_unique<Trainer>(options(batch, epochs), task, o);
    auto p0 = params_of(*t);
    REQUIRE(t->fit().status == FitResult::Status::completed);
    return std::make_pair(p0, params_of(*t));
  };
  // From zero moments the bias-corrected first step is lr * g / (|g| + eps), elementwise;
  // AdamW's decoupled decay scales the parameter by 1 - lr * wd first.
  for (const double wd : {0.0, 0.1}) {
    INFO("adamw weight_decay " << wd);
    auto [p0, p1] = run(wd == 0 ? "adam" : "adamw", true, wd, 64, 1);
    auto [gw, gb] = mse_grad(p0[0], p0[1], task->x_, task->y_);
    const double keep = 1 - 0.05 * wd;
    CHECK(max_diff({p1[0], p1[1]}, {p0[0] * keep - 0.05 * gw / (gw.abs() + 1e-8),
                                    p0[1] * keep - 0.05 * gb / (gb.abs() + 1e-8)}) < 1e-6);
  }
  // Over many steps, with and without weight decay, each follows torch::optim's.
  for (const std::string name : {"adam", "adamw"})
    for (const double wd : {0.0, 0.1}) {
      INFO(name << " weight_decay " << wd);
      auto fused = run(name, true, wd, 8, 3), plain = run(name, false, wd, 8, 3);
      CHECK(max_diff(fused.first, plain.first) == 0);  // same start
      CHECK(max_diff(fused.second, plain.second) < 1e-5);
      CHECK(max_diff(fused.second, fused.first) > 1e-2);  // and it trained
    }
}

TEST_CASE("fused adam moves each parameter's version counter on at every step, as torch::optim",
          "[techniques][optim]") {
  // Its pass writes through pointers: without the counter a graph saved before a step would
  // read the new values in backward, and a bf16 copy's record would never age.
  for (const bool fused : {true, false}) {
    INFO((fused ? "fused" : "torch::optim"));
    OptimizerOptions o = optimizer("adamw", 0.05);
    o.fused = fused;
    Trainer t(options(8, 1), std::make_shared<LinearTask>(64), o);  // 8 steps
    std::vector<std::uint32_t> before;
    for (const auto& p : t.model().parameters()) before.push_back(p._version());
    REQUIRE(t.fit().status == FitResult::Status::completed);
    const auto params = t.model().parameters();
    REQUIRE(params.size() == before.size());
    for (std::size_t i = 0; i < params.size(); ++i) CHECK(params[i]._version() >= before[i] + 8);
  }
}

TEST_CASE("an optimizer state whose counts do not fit the run's optimizer is refused unread",
          "[techniques][state]") {
  // LibTorch's optimizer load loops and allocates by the counts optimizer.pt states: a
  // damaged or hostile file claiming 2^31 parameter groups (its manifest rewritten to match)
  // must be refused from that count, naming the file and the field, not followed.
  OptimizerOptions sgd = optimizer("sgd", 0.1);
  Trainer first(options(8), std::make_shared<LinearTask>(16), sgd);
  REQUIRE(first.fit().status == FitResult::Status::completed);
  TempDir tmp;
  const auto ckpt = tmp / "ckpt";
  first.context().save_checkpoint(ckpt.string(), "test");

  torch::serialize::OutputArchive top, opt, groups;
  groups.write("param_groups/size", torch::tensor(std::int64_t{1} << 31));
  opt.write("param_groups", groups);
  top.write("optimizer", opt);
  std::ostringstream out;
  top.save_to(out);
  const auto bytes = out.str();
  wick::test::write_file(ckpt / "optimizer.pt", bytes);
  // A consistent forgery: state.pt's record of optimizer.pt and the manifest rewritten too,
  // so that only the count itself can stop it.
  const auto state_bytes = wick::test::read_file(ckpt / "state.pt");
  auto state = torch::pickle_load(std::vector<char>(state_bytes.begin(), state_bytes.end()));
  auto step = state.toGenericDict().at("step").toGenericDict();
  step.insert_or_assign("optimizer.pt", wick::sha256_hex(bytes));
  const auto pickled = torch::pickle_save(state);
  const std::string new_state(pickled.begin(), pickled.end());
  wick::test::write_file(ckpt / "state.pt", new_state);
  auto m = wick::test::read_json(ckpt / "manifest.json");
  m["files"]["optimizer.pt"] = {{"bytes", bytes.size()}, {"sha256", wick::sha256_hex(bytes)}};
  m["files"]["state.pt"] = {{"bytes", new_state.size()}, {"sha256", wick::sha256_hex(new_state)}};
  wick::test::write_file(ckpt / "manifest.json", m.dump(2));

  Trainer second(options(8), std::make_shared<LinearTask>(16), sgd);
  restore_at_start(second, ckpt.string());
  const auto res = second.fit();
  CHECK(res.status == FitResult::Status::failed);
  CHECK_THAT(res.error, Catch::Contains("optimizer.pt, optimizer 'optimizer': field "
                                        "'param_groups/size' says 2147483648 parameter groups, "
                                        "this run's optimizer has 1"));
}

// ---- what forward hands to loss, per-epoch state, values logged anywhere (SDK 2.9) --------

namespace {

// A variational autoencoder in miniature (no sampling: z = mu), whose loss needs mu and
// log_var beside the reconstruction. `extras`: forward hands them over with Context::set_extra;
// else loss computes them again from the batch (the reference).
class TinyVae : public Task {
 public:
  explicit TinyVae(bool extras) : extras_(extras) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
    auto x = torch::randn({32, 4}, gen);
    data_ = std::make_shared<TensorDataset>(x, x);
  }
  std::shared_ptr<torch::nn::Module> model() override {
    auto root = std::make_shared<torch::nn::Module>();
    enc_ = root->register_module(
        "enc",
        torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 4)));
    dec_ = root->register_module("dec", torch::nn::Linear(2, 4));
    return root;
  }
  std::shared_ptr<Dataset> train_data() override { return data_; }
  at::Tensor forward(Context& c, const Batch& b) override {
    auto h = enc_->forward(b.input);
    if (extras_) {
      c.set_extra("mu", h.slice(1, 0, 2));
      c.set_extra("log_var", h.slice(1, 2, 4));
    }
    return dec_->forward(h.slice(1, 0, 2));
  }
  Output loss(Context& c, const at::Tensor& pred, const Batch& b) override {
    at::Tensor mu, log_var;
    if (extras_) {
      mu = c.extra("mu");
      log_var = c.extra("log_var");
    } else {
      auto h = enc_->forward(b.input);
      mu = h.slice(1, 0, 2);
      log_var = h.slice(1, 2, 4);
    }
    Output o;
    o.loss = torch::mse_loss(pred, b.target) -
             0.5 * torch::mean(1 + log_var - mu.pow(2) - log_var.exp());
    return o;
  }

 private:
  bool extras_;
  std::shared_ptr<TensorDataset> data_;
  torch::nn::Sequential enc_{nullptr};
  torch::nn::Linear dec_{nullptr};
};

std::vector<at::Tensor> trained_vae(bool extras, const std::string& hooks) {
  Trainer t(options(8, 2), std::make_shared<TinyVae>(extras), optimizer("sgd", 0.05));
  for (auto& h : load_hooks(hooks)) t.add_hook(std::move(h));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  return params_of(t);
}

}  // namespace

TEST_CASE("forward hands named tensors to loss through Context extras", "[techniques][sdk]") {
  // The same training as a loss that computes mu and log_var again: plainly, when loss runs
  // again under recompute_loss (sam), and with the encoder's elements checkpointed.
  for (const std::string& hooks :
       {std::string(""), std::string("[[hooks]]\nplugin = \"sam\"\n"),
        std::string("[[hooks]]\nplugin = \"activation_checkpointing\"\nmodules = [\"enc.*\"]\n")}) {
    INFO("hooks: " << hooks);
    const auto with = trained_vae(true, hooks), reference = trained_vae(false, hooks);
    // The same up to rounding: one backward through the encoder against two.
    CHECK(max_diff(with, reference) < 1e-6);
  }
  // sam's second loss really ran (and read the extras again): it trains otherwise.
  CHECK(max_diff(trained_vae(true, ""), trained_vae(true, "[[hooks]]\nplugin = \"sam\"\n")) > 0);

  // An extra forward did not set: the error names it, those set, and the fix.
  auto task = std::make_shared<LinearTask>(16);
  task->on_forward = [](Context& c, const at::Tensor& pred) {
    c.set_extra("mu", pred);
    CHECK(c.has_extra("mu"));
    CHECK_FALSE(c.has_extra("sigma"));
    (void)c.extra("sigma");
  };
  Trainer t(options(8), task, optimizer("sgd", 0.1));
  const auto res = t.fit();
  CHECK(res.status == FitResult::Status::failed);
  CHECK_THAT(res.error, Catch::Contains("Context::extra(\"sigma\"): this step's forward set no "
                                        "extra of that name (it set 'mu'); call "
                                        "ctx.set_extra(\"sigma\", tensor) in forward"));
}

namespace {

// An LSTM-like task whose per-epoch state (a running value fed into each prediction) starts
// at 0 with each epoch; it travels in the checkpoint. `reset`: how it resets at before_epoch.
class CarryTask : public LinearTask {
 public:
  enum class Reset { always, unless_resumed };
  explicit CarryTask(Reset r) : LinearTask(32), reset_(r) {}
  void connect(Registrar& r) override {
    r.on(Point::before_epoch, [this](Context& c) {
      if (reset_ == Reset::always || !c.state().epoch_resumed) carry_ = 0;
    });
  }
  at::Tensor forward(Context& c, const Batch& b) override {
    carry_ = 0.5 * carry_ + 1;
    return LinearTask::forward(c, b) * (1 + 0.1 * carry_);
  }
  bool has_state() const override { return true; }
  void save_state(StateDict& out) const override { out.set_float("carry", carry_); }
  void load_state(const StateDict& in) override { carry_ = in.get_float("carry"); }

 private:
  Reset reset_;
  double carry_ = 0;
};

std::vector<at::Tensor> carried(CarryTask::Reset reset, bool interrupted) {
  const auto whole = [&] {
    Trainer t(options(8, 2), std::make_shared<CarryTask>(reset), optimizer("sgd", 0.05));
    REQUIRE(t.fit().status == FitResult::Status::completed);
    return params_of(t);
  };
  if (!interrupted) return whole();
  // Stopped after the 2nd batch of epoch 1 (a position like a SIGINT's), then resumed.
  TempDir tmp;
  const auto ckpt = (tmp / "ckpt").string();
  {
    Trainer first(options(8, 2), std::make_shared<CarryTask>(reset), optimizer("sgd", 0.05));
    auto stop = std::make_shared<Probe>();
    stop->stages = false;
    // Saved before the stop is asked for (a checkpoint the stopped fit ends with keeps it).
    stop->points[Point::after_step] = [&](Context& c) {
      if (c.state().training() && c.state().epoch == 1 && c.state().batch_idx == 1) {
        c.save_checkpoint(ckpt, "test");
        c.request_stop("test");
      }
    };
    first.add_hook(entry(stop, "stop", 100));
    REQUIRE(first.fit().status == FitResult::Status::completed);
    REQUIRE(first.state().optimizer_step == 6);
  }
  Trainer second(options(8, 2), std::make_shared<CarryTask>(reset), optimizer("sgd", 0.05));
  restore_at_start(second, ckpt);
  REQUIRE(second.fit().status == FitResult::Status::completed);
  return params_of(second);
}

}  // namespace

TEST_CASE("before_epoch of an epoch resumed in its middle says so: per-epoch state survives",
          "[techniques][state]") {
  // Reset unless resumed: the resumed run trains exactly as the whole one.
  CHECK(max_diff(carried(CarryTask::Reset::unless_resumed, true),
                 carried(CarryTask::Reset::unless_resumed, false)) == 0);
  // Reset always (what a task did before epoch_resumed): the state restored from the
  // checkpoint is lost, and the run is not the same.
  CHECK(max_diff(carried(CarryTask::Reset::always, true),
                 carried(CarryTask::Reset::always, false)) > 0);
}

TEST_CASE("a value logged at any lifecycle point lands in a record, the last ones in the summary",
          "[techniques][records]") {
  TempDir tmp;
  TrainerOptions o = options(8, 2);
  o.write_outputs = true;
  o.output_dir = (tmp / "run").string();
  o.log_every = 2;
  Trainer t(o, std::make_shared<LinearTask>(16, 8), optimizer("sgd", 0.1));
  auto logger = std::make_shared<Probe>();
  logger->stages = false;
  const std::vector<Point> points = {Point::before_fit, Point::before_epoch, Point::before_step,
                                     Point::after_pred, Point::after_loss,   Point::after_backward,
                                     Point::after_step, Point::before_valid, Point::after_epoch,
                                     Point::after_fit};
  for (Point p : points)
    logger->points[p] = [p](Context& c) {
      c.log("at/" + std::string(to_string(p)), static_cast<double>(c.state().optimizer_step));
    };
  t.add_hook(entry(logger, "logger", 0));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  const auto recs = wick::test::read_jsonl(tmp / "run" / "metrics.jsonl");
  std::set<std::string> seen;
  for (const auto& r : recs)
    for (const auto& [k, v] : r.items())
      if (k.rfind("at/", 0) == 0) seen.insert(k);
  for (Point p : points) CHECK(seen.count("at/" + std::string(to_string(p))) == 1);
  // after_epoch's value is in the epoch record it follows (the one hooks read there).
  for (const auto& r : recs)
    if (r["kind"] == "epoch") CHECK(r.contains("at/after_epoch"));
  // after_fit's, after every record: in the last one, and in summary.json.
  CHECK(recs.back().contains("at/after_fit"));
  const auto s = wick::test::read_json(tmp / "run" / "summary.json");
  CHECK(s["at/after_fit"] == 4);
}
