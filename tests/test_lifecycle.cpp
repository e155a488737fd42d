// The trainer core: the order of the eleven lifecycle points, hook order, stage chains,
// cancels and errors. In process (a Hook subclass and a tiny Task defined here) and through
// `wick fit` with the recorder test plugin.
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "support.hpp"
#include "system/error_text.hpp"
#include "wick/config.hpp"
#include "wick/task.hpp"
#include "wick/trainer.hpp"

using namespace wick::test;
using wick::Point;
using wick::Stage;

namespace {

// 8 training samples and 4 validation samples of y = x0 - x1: with batch size 4, an epoch is
// two training batches and one validation batch.
class TinyTask : public wick::Task {
 public:
  std::shared_ptr<torch::nn::Module> model() override {
    net_ = torch::nn::Linear(2, 1);
    return net_.ptr();
  }
  std::shared_ptr<wick::Dataset> train_data() override { return make(8, 1); }
  std::shared_ptr<wick::Dataset> valid_data() override { return make(4, 2); }
  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->forward(b.input);
  }
  wick::Output loss(wick::Context&, const at::Tensor& pred, const wick::Batch& b) override {
    wick::Output o;
    o.loss = torch::mse_loss(pred, b.target);
    return o;
  }

 private:
  static std::shared_ptr<wick::Dataset> make(std::int64_t n, std::int64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto x = torch::randn({n, 2}, gen);
    auto y = (x.select(1, 0) - x.select(1, 1)).unsqueeze(1);
    return std::make_shared<wick::TensorDataset>(x, y);
  }
  torch::nn::Linear net_{nullptr};
};

// A hook whose subscriptions are given as a function, so each test wires what it needs.
class FnHook : public wick::Hook {
 public:
  explicit FnHook(std::function<void(wick::Registrar&)> f) : f_(std::move(f)) {}
  void connect(wick::Registrar& r) override { f_(r); }

 private:
  std::function<void(wick::Registrar&)> f_;
};

wick::HookEntry entry(const std::string& name, int order, std::function<void(wick::Registrar&)> f) {
  wick::HookEntry e;
  e.hook = std::make_shared<FnHook>(std::move(f));
  e.plugin = name;
  e.instance = name;
  e.order = order;
  return e;
}

wick::TrainerOptions tiny_options(const TempDir& dir) {
  wick::TrainerOptions o;
  o.epochs = 2;
  o.batch_size = 4;
  o.shuffle = false;
  o.log_every = 0;
  o.output_dir = (dir / "run").string();
  return o;
}

std::string line(std::string_view what, const wick::Context& c) {
  auto& s = const_cast<wick::Context&>(c).state();
  std::ostringstream o;
  o << what << ' ' << s.epoch << ' ' << s.batch_idx;
  return o.str();
}

// Subscribes to all eleven points and appends "POINT EPOCH BATCH" to log.
std::function<void(wick::Registrar&)> record_all(std::vector<std::string>& log) {
  return [&log](wick::Registrar& r) {
    for (std::size_t i = 0; i < wick::kNumPoints; ++i) {
      auto p = static_cast<Point>(i);
      r.on(p, [&log, p](wick::Context& c) { log.push_back(line(wick::to_string(p), c)); });
    }
  };
}

std::vector<float> params_of(torch::nn::Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters()) {
    auto t = p.detach().flatten();
    for (std::int64_t i = 0; i < t.numel(); ++i) out.push_back(t[i].item<float>());
  }
  return out;
}

// One epoch: two training batches (with backward) and one validation batch.
std::vector<std::string> epoch_lines(int e) {
  const std::string E = std::to_string(e);
  std::vector<std::string> out = {"before_epoch " + E + " 0"};
  for (const char* b : {"0", "1"})
    for (const char* p :
         {"before_step", "after_pred", "after_loss", "after_backward", "after_step"})
      out.push_back(std::string(p) + " " + E + " " + b);
  for (const char* p : {"before_valid", "before_step", "after_pred", "after_loss", "after_step"})
    out.push_back(std::string(p) + " " + E + " 0");
  // The batch index is the training one again once validation is over.
  out.push_back("after_epoch " + E + " 1");
  return out;
}

}  // namespace

// The expected sequence, spelled out in full for the first epoch and built per epoch for the
// second, so that a reader can check it against design.md section 1.
const std::vector<std::string> kTwoEpochs = [] {
  std::vector<std::string> s = {"before_fit 0 0"};
  for (int e : {0, 1}) {
    auto ep = epoch_lines(e);
    s.insert(s.end(), ep.begin(), ep.end());
  }
  s.push_back("after_fit 1 0");
  return s;
}();

TEST_CASE("the first epoch's points, spelled out") {
  // Guards the helper above against a mistake that would hide one in the trainer.
  const std::vector<std::string> first = {
      "before_epoch 0 0",   "before_step 0 0",    "after_pred 0 0",  "after_loss 0 0",
      "after_backward 0 0", "after_step 0 0",     "before_step 0 1", "after_pred 0 1",
      "after_loss 0 1",     "after_backward 0 1", "after_step 0 1",  "before_valid 0 0",
      "before_step 0 0",    "after_pred 0 0",     "after_loss 0 0",  "after_step 0 0",
      "after_epoch 0 1"};
  CHECK(epoch_lines(0) == first);
  CHECK(kTwoEpochs.size() == 1 + 2 * first.size() + 1);
}

TEST_CASE("all eleven lifecycle points fire in order over 2 epochs with validation") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  std::vector<std::string> log;
  std::vector<std::string> phases;
  t.add_hook(entry("rec", 0, record_all(log)));
  t.add_hook(entry("phase", 1, [&](wick::Registrar& r) {
    r.on(Point::before_valid,
         [&](wick::Context& c) { phases.push_back(c.state().validating() ? "valid" : "train"); });
    r.on(Point::after_backward,
         [&](wick::Context& c) { phases.push_back(c.state().training() ? "train" : "valid"); });
  }));

  SECTION("a completed fit: ten points, no after_cancel") {
    auto res = t.fit();
    REQUIRE(res.status == wick::FitResult::Status::completed);
    CHECK(log == kTwoEpochs);
    CHECK(phases == std::vector<std::string>{"train", "train", "valid", "train", "train", "valid"});
    CHECK(t.state().optimizer_step == 4);
    CHECK(t.state().micro_step == 4);
    CHECK(t.state().samples_seen == 16);
  }

  SECTION("a fit cancelled in the last training step: after_cancel, and no after_fit") {
    int calls = 0;
    t.add_hook(entry("cancel", 5, [&](wick::Registrar& r) {
      r.on(Point::after_step, [&](wick::Context& c) {
        if (c.state().training() && ++calls == 4) throw wick::CancelFit();
      });
    }));
    auto res = t.fit();
    CHECK(res.status == wick::FitResult::Status::cancelled);
    CHECK(res.exit_code() == 0);
    CHECK(res.stop_reason == "plugin 'cancel' (instance 'cancel') at after_step: CancelFit");
    // Everything up to epoch 1's last training after_step, then after_cancel.
    std::vector<std::string> expected(kTwoEpochs.begin(), kTwoEpochs.begin() + 1 + 17 + 11);
    REQUIRE(expected.back() == "after_step 1 1");
    expected.push_back("after_cancel 1 1");
    CHECK(log == expected);
  }
}

TEST_CASE("hooks run by order, ties in the order they were added") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  std::vector<std::string> log;
  auto add = [&](const std::string& name, int order) {
    t.add_hook(entry(name, order, [&log, name](wick::Registrar& r) {
      r.on(Point::before_fit, [&log, name](wick::Context&) { log.push_back(name); });
      r.stage(Stage::zero_grad, [&log, name](wick::Context&, wick::Next next) {
        log.push_back("zero_grad:" + name);
        return next();
      });
    }));
  };
  add("a", 5);
  add("b", -1);
  add("c", 5);
  add("d", 0);
  add("e", -1);
  auto res = t.fit();
  REQUIRE(res.status == wick::FitResult::Status::completed);
  const std::vector<std::string> order = {"b", "e", "d", "a", "c"};
  REQUIRE(log.size() == 5 + 4 * 5);
  CHECK(std::vector<std::string>(log.begin(), log.begin() + 5) == order);
  const std::vector<std::string> chain = {"zero_grad:b", "zero_grad:e", "zero_grad:d",
                                          "zero_grad:a", "zero_grad:c"};
  CHECK(std::vector<std::string>(log.begin() + 5, log.begin() + 10) == chain);
  // The schedule describe prints agrees.
  const auto& row = t.schedule().points[static_cast<std::size_t>(Point::before_fit)];
  REQUIRE(row.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) CHECK(row[i].instance == order[i]);
  CHECK(row[0].order == -1);
  CHECK(row[4].order == 5);
}

TEST_CASE("a stage chain runs its handlers by order and ends in the default") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  std::vector<std::string> log;
  auto weight = [&t] { return params_of(t.model()); };
  auto has_grad = [&t] { return t.model().parameters()[0].grad().defined(); };
  auto handler = [&](const std::string& name, bool innermost) {
    return [&, name, innermost](wick::Registrar& r) {
      r.stage(Stage::optimizer_step, [&, name, innermost](wick::Context&, wick::Next next) {
        log.push_back("enter " + name);
        auto before = weight();
        bool stepped = next();
        // Only after the innermost handler's next() has the default run.
        if (innermost) log.push_back(weight() != before ? "default stepped" : "no step");
        log.push_back("leave " + name + (stepped ? " true" : " false"));
        return stepped;
      });
      if (!innermost) return;
      r.stage(Stage::backward, [&](wick::Context&, wick::Next next) {
        log.push_back(std::string("backward: grad before ") + (has_grad() ? "yes" : "no"));
        bool r2 = next();
        log.push_back(std::string("backward: grad after ") + (has_grad() ? "yes" : "no"));
        return r2;
      });
      r.stage(Stage::zero_grad, [&](wick::Context&, wick::Next next) {
        bool r2 = next();
        log.push_back(std::string("zero_grad: grad after ") + (has_grad() ? "yes" : "no"));
        return r2;
      });
    };
  };
  t.add_hook(entry("x", 3, handler("x", true)));
  t.add_hook(entry("y", -2, handler("y", false)));
  t.add_hook(entry("z", 0, handler("z", false)));
  auto res = t.fit();
  REQUIRE(res.status == wick::FitResult::Status::completed);
  const std::vector<std::string> one_step = {"backward: grad before no",
                                             "backward: grad after yes",
                                             "enter y",
                                             "enter z",
                                             "enter x",
                                             "default stepped",
                                             "leave x true",
                                             "leave z true",
                                             "leave y true",
                                             "zero_grad: grad after no"};
  REQUIRE(log.size() == 4 * one_step.size());
  for (std::size_t s = 0; s < 4; ++s)
    CHECK(std::vector<std::string>(log.begin() + s * one_step.size(),
                                   log.begin() + (s + 1) * one_step.size()) == one_step);
  CHECK(t.state().optimizer_step == 4);
}

TEST_CASE("an optimizer_step handler that declines next: no step, and the step is not counted") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  const auto initial = params_of(t.model());
  std::vector<std::string> log;
  t.add_hook(entry("outer", -1, [&](wick::Registrar& r) {
    r.stage(Stage::optimizer_step, [&](wick::Context&, wick::Next next) {
      bool stepped = next();
      log.push_back(stepped ? "outer saw true" : "outer saw false");
      return stepped;
    });
    r.on(Point::after_step, [&](wick::Context& c) {
      if (c.state().training())
        log.push_back(std::string("stepped ") + (c.state().stepped ? "true" : "false") + " count " +
                      std::to_string(c.state().optimizer_step));
    });
  }));
  t.add_hook(entry("decliner", 1, [&](wick::Registrar& r) {
    r.stage(Stage::optimizer_step, [&](wick::Context&, wick::Next) { return false; });
  }));
  auto res = t.fit();
  REQUIRE(res.status == wick::FitResult::Status::completed);
  CHECK(params_of(t.model()) == initial);
  CHECK(t.state().optimizer_step == 0);
  CHECK(t.state().micro_step == 4);
  CHECK(t.state().stepped == false);
  const std::vector<std::string> per_step = {"outer saw false", "stepped false count 0"};
  REQUIRE(log.size() == 8);
  for (std::size_t s = 0; s < 4; ++s)
    CHECK(std::vector<std::string>(log.begin() + 2 * s, log.begin() + 2 * s + 2) == per_step);
  auto summary = read_json(dir / "run" / "summary.json");
  CHECK(summary["optimizer_steps"] == 0);
  CHECK(summary["micro_steps"] == 4);
}

TEST_CASE("a stop asked for at before_fit or before_epoch trains no batch of that epoch") {
  for (const Point at : {Point::before_fit, Point::before_epoch}) {
    DYNAMIC_SECTION(wick::to_string(at)) {
      TempDir dir;
      wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
      const auto initial = params_of(t.model());
      std::vector<std::string> log;
      t.add_hook(entry("stopper", 0, [&, at](wick::Registrar& r) {
        r.on(at, [](wick::Context& c) { c.request_stop("asked before training"); });
        r.on(Point::before_step, [&](wick::Context& c) { log.push_back(line("before_step", c)); });
      }));
      const auto res = t.fit();
      INFO(res.error);
      REQUIRE(res.status == wick::FitResult::Status::completed);
      CHECK(res.stop_reason == "asked before training");
      CHECK(t.state().micro_step == 0);
      CHECK(params_of(t.model()) == initial);
      // Only the validation's batch ran (epoch 0 is validated as a stopped epoch is).
      CHECK(log == std::vector<std::string>{"before_step 0 0"});
    }
  }
}

TEST_CASE("TrainerOptions from a host program are checked like a config's") {
  TempDir dir;
  auto o = tiny_options(dir);
  o.device = wick::Device{wick::DeviceType::cuda, 0};
  if (!torch::cuda::is_available())
    CHECK_THROWS_WITH(wick::Trainer(o, std::make_shared<TinyTask>()),
                      Catch::StartsWith("trainer.device = \"cuda:0\" but no CUDA device is "
                                        "visible to LibTorch") &&
                          Catch::EndsWith("; use \"cpu\" or \"auto\""));
}

TEST_CASE("a model with nothing to train is refused when a fit starts, before it writes") {
  // TinyTask's linear layer with its parameters frozen by the task itself.
  class FrozenTask : public TinyTask {
   public:
    std::shared_ptr<torch::nn::Module> model() override {
      auto m = TinyTask::model();
      for (auto& p : m->parameters()) p.requires_grad_(false);
      return m;
    }
  };
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<FrozenTask>());  // evaluation needs none
  const auto res = t.fit();
  CHECK(res.config_error);
  CHECK_THAT(res.error, Catch::Contains("the task's model has no trainable parameter (2 "
                                        "parameters, none with requires_grad on), so nothing "
                                        "would train"));
  CHECK_FALSE(fs::exists(dir / "run"));
}

TEST_CASE("a batch of another length than its indices and a task metric named loss are refused") {
  // A data set whose get() drops a row: trained silently, the records would count samples
  // that never trained.
  class ShortData : public wick::TensorDataset {
   public:
    using TensorDataset::TensorDataset;
    wick::Batch get(const at::Tensor& indices, wick::Fetch& f) override {
      auto b = TensorDataset::get(indices, f);
      b.input = b.input.narrow(0, 0, b.input.size(0) - 1);
      return b;
    }
  };
  class ShortTask : public TinyTask {
   public:
    std::shared_ptr<wick::Dataset> train_data() override {
      return std::make_shared<ShortData>(torch::randn({8, 2}), torch::randn({8, 1}));
    }
  };
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<ShortTask>());
  auto res = t.fit();
  REQUIRE(res.status == wick::FitResult::Status::failed);
  CHECK_THAT(res.error, Catch::Contains("failed to load batch 0 of epoch 0") &&
                            Catch::Contains("get() returned 3 rows of input for 4 indices"));
  // A metric named loss would be train/loss and valid/loss, over the loss's own.
  class LossMetricTask : public TinyTask {
   public:
    wick::Output loss(wick::Context& c, const at::Tensor& pred, const wick::Batch& b) override {
      auto o = TinyTask::loss(c, pred, b);
      o.metrics.emplace_back("loss", torch::zeros({}));
      return o;
    }
  };
  TempDir dir2;
  wick::Trainer t2(tiny_options(dir2), std::make_shared<LossMetricTask>());
  res = t2.fit();
  REQUIRE(res.status == wick::FitResult::Status::failed);
  CHECK_THAT(res.error, Catch::Contains("the task's loss() returned a metric named 'loss', which "
                                        "would replace train/loss and valid/loss"));
}

TEST_CASE(
    "a CancelFit at before_step ends between steps: model.pt keeps the weights. A save mid-step is "
    "refused") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  t.add_hook(entry("stopper", 0, [](wick::Registrar& r) {
    r.on(Point::before_step, [](wick::Context& c) {
      if (c.state().training() && c.state().optimizer_step == 1) throw wick::CancelFit();
    });
  }));
  const auto res = t.fit();
  REQUIRE(res.status == wick::FitResult::Status::cancelled);
  CHECK(t.state().optimizer_step == 1);
  // No work of the second step had begun: the first step's weights are whole.
  CHECK(res.model_file == (dir / "run" / "model.pt").string());
  CHECK(fs::exists(dir / "run" / "model.pt"));
  // A checkpoint asked for inside a step (its forward has run) is no point to resume from.
  TempDir dir2;
  wick::Trainer t2(tiny_options(dir2), std::make_shared<TinyTask>());
  t2.add_hook(entry("saver", 0, [](wick::Registrar& r) {
    r.on(Point::after_loss, [](wick::Context& c) {
      if (c.state().training()) c.save_checkpoint("mid", "test");
    });
  }));
  const auto mid = t2.fit();
  REQUIRE(mid.status == wick::FitResult::Status::failed);
  CHECK_THAT(mid.error, Catch::Contains("plugin 'saver' (instance 'saver') at after_loss: not "
                                        "saving checkpoint 'mid' (test): a training step is "
                                        "under way"));
  CHECK_FALSE(fs::exists(dir2 / "run" / "mid"));
}

TEST_CASE("a hook's save_state that throws a type of its own is named at the save") {
  // Not a std::exception: without its name the failure was the checkpoint's.
  struct Odd : wick::Hook {
    void connect(wick::Registrar& r) override {
      r.on(Point::after_step, [](wick::Context& c) { c.save_checkpoint("ck", "test"); });
    }
    bool has_state() const override { return true; }
    void save_state(wick::StateDict&) const override { throw 42; }
  };
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  wick::HookEntry e;
  e.hook = std::make_shared<Odd>();
  e.plugin = e.instance = "odd";
  t.add_hook(e);
  const auto res = t.fit();
  REQUIRE(res.status == wick::FitResult::Status::failed);
  CHECK_THAT(res.error, Catch::Contains("hook 'odd' cannot save its state: an exception that is "
                                        "not a std::exception"));
}

TEST_CASE("a gradients handler that skips a batch leaves that step no output of another's") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  int skipped = 0, stale = 0;
  t.add_hook(entry("outliers", 0, [&](wick::Registrar& r) {
    r.stage(wick::Stage::gradients, [&](wick::Context& c, wick::Next next) {
      if (c.state().batch_idx == 1) return false;  // the second batch of each epoch: skipped
      return next();
    });
    r.on(wick::Point::after_step, [&](wick::Context& c) {
      if (c.state().batch_idx != 1) return;
      ++skipped;
      stale += c.output().loss.defined();
    });
  }));
  REQUIRE(t.fit().status == wick::FitResult::Status::completed);
  CHECK(skipped == 2);
  CHECK(stale == 0);  // the first batch's loss, before the fix
}

TEST_CASE("a record sink that fails is named: it runs where the trainer writes the record") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  t.add_hook(entry("sinker", 0, [](wick::Registrar& r) {
    r.on_record([](const wick::Record&) { throw std::runtime_error("the disk is gone"); });
  }));
  const auto res = t.fit();
  REQUIRE(res.status == wick::FitResult::Status::failed);
  CHECK_THAT(res.error, Catch::Contains("plugin 'sinker' (instance 'sinker') writing a record: "
                                        "the disk is gone"));
  // Nor is a throw of another type left unnamed.
  TempDir dir3;
  wick::Trainer t3(tiny_options(dir3), std::make_shared<TinyTask>());
  t3.add_hook(entry(
      "odd", 0, [](wick::Registrar& r) { r.on_record([](const wick::Record&) { throw 42; }); }));
  const auto odd = t3.fit();
  REQUIRE(odd.status == wick::FitResult::Status::failed);
  CHECK_THAT(odd.error, Catch::Contains("plugin 'odd' (instance 'odd') writing a record: an "
                                        "exception that is not a std::exception"));
  // A sink's CancelFit stays a cancel.
  TempDir dir2;
  wick::Trainer t2(tiny_options(dir2), std::make_shared<TinyTask>());
  t2.add_hook(entry("canceller", 0, [](wick::Registrar& r) {
    r.on_record([](const wick::Record&) { throw wick::CancelFit(); });
  }));
  CHECK(t2.fit().status == wick::FitResult::Status::cancelled);
}

TEST_CASE("an exception in a hook names the plugin, the instance and the point") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  std::vector<std::string> log;
  t.add_hook(entry("watch", 0, [&](wick::Registrar& r) {
    r.on(Point::after_cancel, [&](wick::Context& c) { log.push_back(line("after_cancel", c)); });
    r.on(Point::after_fit, [&](wick::Context& c) { log.push_back(line("after_fit", c)); });
  }));

  SECTION("at a point") {
    wick::HookEntry e = entry("boom", 2, [](wick::Registrar& r) {
      r.on(Point::after_backward, [](wick::Context& c) {
        if (c.state().epoch == 1) throw std::runtime_error("kaboom");
      });
    });
    e.instance = "boom1";
    t.add_hook(e);
    auto res = t.fit();
    CHECK(res.status == wick::FitResult::Status::failed);
    CHECK(res.exit_code() == 1);
    CHECK(res.error == "plugin 'boom' (instance 'boom1') at after_backward: kaboom");
    CHECK(log == std::vector<std::string>{"after_cancel 1 0"});
    auto s = read_json(dir / "run" / "summary.json");
    CHECK(s["status"] == "failed");
    CHECK(s["error"] == res.error);
    CHECK(s["optimizer_steps"] == 2);
  }

  SECTION("in a stage handler, after the rest of the chain returned") {
    // The inner handler ran last; the error is the outer one's, thrown after next().
    t.add_hook(entry("inner", 1, [](wick::Registrar& r) {
      r.stage(Stage::optimizer_step, [](wick::Context&, wick::Next next) { return next(); });
    }));
    t.add_hook(entry("outer", -1, [](wick::Registrar& r) {
      r.stage(Stage::optimizer_step, [](wick::Context&, wick::Next next) -> bool {
        next();
        throw std::runtime_error("after next");
      });
    }));
    auto res = t.fit();
    CHECK(res.status == wick::FitResult::Status::failed);
    CHECK(res.error == "plugin 'outer' (instance 'outer') at optimizer_step: after next");
    CHECK(log == std::vector<std::string>{"after_cancel 0 0"});
  }

  SECTION("in after_cancel itself: both errors are reported") {
    t.add_hook(entry("boom", 2, [](wick::Registrar& r) {
      r.on(Point::before_fit, [](wick::Context&) { throw std::runtime_error("first"); });
      r.on(Point::after_cancel, [](wick::Context&) { throw std::runtime_error("second"); });
    }));
    auto res = t.fit();
    CHECK(res.status == wick::FitResult::Status::failed);
    CHECK(res.error ==
          "plugin 'boom' (instance 'boom') at before_fit: first; then plugin 'boom' (instance "
          "'boom') at after_cancel: second");
  }
}

TEST_CASE("cancels in the trainer core: each scope is skipped and after_cancel fires") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  std::vector<std::string> log;
  t.add_hook(entry("rec", 0, record_all(log)));
  auto count = [&](const std::string& l) { return std::count(log.begin(), log.end(), l); };

  SECTION("CancelEpoch in before_epoch skips that epoch's training, not the fit") {
    t.add_hook(entry("skip", 1, [](wick::Registrar& r) {
      r.on(Point::before_epoch, [](wick::Context& c) {
        if (c.state().epoch == 0) throw wick::CancelEpoch();
      });
    }));
    auto res = t.fit();
    CHECK(res.status == wick::FitResult::Status::completed);
    CHECK(t.state().optimizer_step == 2);
    CHECK(count("after_cancel 0 0") == 1);
    CHECK(count("after_backward 0 0") == 0);
    CHECK(count("before_valid 0 0") == 1);
    CHECK(count("after_epoch 0 0") == 1);
    CHECK(count("after_fit 1 0") == 1);
    auto s = read_json(dir / "run" / "summary.json");
    CHECK(s["cancelled_epochs"] == 1);
    CHECK(s["cancelled_steps"] == 0);
  }

  SECTION("CancelStep in a validation step skips that batch only") {
    t.add_hook(entry("skip", 1, [](wick::Registrar& r) {
      r.on(Point::before_step, [](wick::Context& c) {
        if (c.state().validating() && c.state().epoch == 1) throw wick::CancelStep();
      });
    }));
    wick::FitResult res;
    std::string out, err;
    wick::test::capturing([&] { res = t.fit(); }, out, err);
    CHECK(res.status == wick::FitResult::Status::completed);
    // A monitor would take the cut pass's values for the whole set's: said once, for epoch 1.
    CHECK(err ==
          "wick: warning: the pass over the validation data in epoch 1 covered 0 of its 4 "
          "samples (a hook's CancelStep or CancelEpoch): its valid/ values are over those only\n");
    CHECK(count("after_cancel 1 0") == 1);
    CHECK(count("after_pred 1 0") == 1);  // the training batch only
    CHECK(count("after_fit 1 0") == 1);
    auto s = read_json(dir / "run" / "summary.json");
    CHECK(s["cancelled_steps"] == 1);
    CHECK(s["status"] == "completed");
    // Validation of epoch 1 ran no batch, so the run ends without validation metrics.
    CHECK(!s.contains("valid/loss"));
  }

  SECTION("CancelEpoch in validation ends that validation; after_epoch still runs") {
    t.add_hook(entry("skip", 1, [](wick::Registrar& r) {
      r.on(Point::before_valid, [](wick::Context& c) {
        if (c.state().epoch == 0) throw wick::CancelEpoch();
      });
    }));
    auto res = t.fit();
    CHECK(res.status == wick::FitResult::Status::completed);
    CHECK(count("after_cancel 0 0") == 1);
    CHECK(count("after_epoch 0 1") == 1);
    CHECK(t.state().optimizer_step == 4);
    auto s = read_json(dir / "run" / "summary.json");
    CHECK(s["cancelled_epochs"] == 1);
  }

  SECTION("CancelStep outside a step (before_fit) ends the fit as cancelled") {
    t.add_hook(entry("early", 1, [](wick::Registrar& r) {
      r.on(Point::before_fit, [](wick::Context&) { throw wick::CancelStep(); });
    }));
    auto res = t.fit();
    CHECK(res.status == wick::FitResult::Status::cancelled);
    CHECK(log == std::vector<std::string>{"before_fit 0 0", "after_cancel 0 0"});
  }
}

TEST_CASE("wick fit runs plugin hooks at the same points in the same order") {
  TempDir dir;
  const auto rec = dir / "rec.txt";
  write_file(dir / "cfg.toml", test_plugins_toml() +
                                   "[trainer]\nepochs = 2\nbatch_size = 32\nshuffle = false\n"
                                   "log_every = 0\noutput_dir = \"" +
                                   (dir / "run").string() +
                                   "\"\n[task]\nplugin = \"synthetic\"\nsamples = 64\n"
                                   "valid_samples = 32\nfeatures = 4\nhidden = [8]\n"
                                   "[[hooks]]\nplugin = \"recorder\"\nname = \"rec\"\npath = \"" +
                                   rec.string() + "\"\n");
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> expected;
  for (const auto& l : kTwoEpochs) expected.push_back("rec " + l);
  std::vector<std::string> got;
  std::istringstream in(read_file(rec));
  for (std::string l; std::getline(in, l);) got.push_back(l);
  CHECK(got == expected);
}

TEST_CASE("config order breaks ties and `order` overrides a plugin's default per instance") {
  TempDir dir;
  const auto rec = dir / "rec.txt";
  auto hook = [&](const std::string& name, const std::string& extra) {
    return "[[hooks]]\nplugin = \"recorder\"\nname = \"" + name + "\"\npath = \"" + rec.string() +
           "\"\npoints = [\"before_fit\"]\nstages = [\"optimizer_step\"]\n" + extra;
  };
  // The recorder's default order is 0: r1 and r3 tie, r2 and r4 override it.
  write_file(dir / "cfg.toml",
             test_plugins_toml() + "[trainer]\nepochs = 1\nbatch_size = 64\nlog_every = 0\n" +
                 "output_dir = \"" + (dir / "run").string() +
                 "\"\n[task]\nplugin = " + "\"synthetic\"\nsamples = 64\nvalid_samples = 0\n" +
                 hook("r1", "") + hook("r2", "order = -5\n") + hook("r3", "") +
                 hook("r4", "order = 0\n") + hook("r5", "order = 7\n"));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(rec) ==
        "r2 before_fit 0 0\nr1 before_fit 0 0\nr3 before_fit 0 0\nr4 before_fit 0 0\n"
        "r5 before_fit 0 0\n"
        "r2 optimizer_step 0 0\nr1 optimizer_step 0 0\nr3 optimizer_step 0 0\n"
        "r4 optimizer_step 0 0\nr5 optimizer_step 0 0\n");

  SECTION("--set overrides the order too") {
    auto r2 = run_wick({"describe", (dir / "cfg.toml").string(), "--set", "hooks.r5.order=-9"});
    INFO(r2.err << r2.out);
    REQUIRE(r2.exit_code == 0);
    CHECK(r2.out.find("| optimizer_step | r5(-9) -> r2(-5) -> r1(0) -> r3(0) -> r4(0) -> "
                      "default: optimizer.step() |") != std::string::npos);
  }
}

TEST_CASE("a plugin handler that declines optimizer_step leaves the model as initialised") {
  TempDir dir;
  const auto rec = dir / "rec.txt";
  auto cfg = [&](const std::string& run, const std::string& hooks) {
    return test_plugins_toml() + "[trainer]\nepochs = 2\nbatch_size = 32\nlog_every = 0\n" +
           "output_dir = \"" + (dir / run).string() + "\"\n[task]\nplugin = \"synthetic\"\n" +
           "samples = 64\nvalid_samples = 0\n" + hooks;
  };
  const std::string decline = "[[hooks]]\nplugin = \"recorder\"\npath = \"" + rec.string() +
                              "\"\npoints = [\"after_step\"]\ndecline = \"optimizer_step\"\n";
  write_file(dir / "declined.toml", cfg("declined", decline));
  write_file(dir / "untrained.toml", cfg("untrained", ""));
  write_file(dir / "trained.toml", cfg("trained", ""));
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"declined", "2"}, {"untrained", "0"}, {"trained", "2"}};
  for (const auto& [name, epochs] : runs) {
    auto r =
        run_wick({"fit", (dir / (name + ".toml")).string(), "--set", "trainer.epochs=" + epochs});
    INFO(name << r.err << r.out);
    REQUIRE(r.exit_code == 0);
  }
  auto declined = read_json(dir / "declined" / "summary.json");
  auto untrained = read_json(dir / "untrained" / "summary.json");
  auto trained = read_json(dir / "trained" / "summary.json");
  CHECK(declined["optimizer_steps"] == 0);
  CHECK(declined["micro_steps"] == 4);
  CHECK(trained["optimizer_steps"] == 4);
  CHECK(declined["model_fingerprint"] == untrained["model_fingerprint"]);
  CHECK(declined["model_fingerprint"] != trained["model_fingerprint"]);
  // Each step: the handler was called, then after_step.
  CHECK(read_file(rec) ==
        "recorder optimizer_step 0 0\nrecorder after_step 0 0\n"
        "recorder optimizer_step 0 1\nrecorder after_step 0 1\n"
        "recorder optimizer_step 1 0\nrecorder after_step 1 0\n"
        "recorder optimizer_step 1 1\nrecorder after_step 1 1\n");
}

// ---- SDK 2.0: each point means something --------------------------------------------------

namespace {
// TinyTask with training metrics, a counter in its checkpoint state, and a record of the
// predictions its loss() saw.
class MeteredTask : public TinyTask {
 public:
  wick::Output loss(wick::Context& c, const at::Tensor& pred, const wick::Batch& b) override {
    seen_pred_sum.push_back(pred.sum().item<double>());
    wick::Output o = TinyTask::loss(c, pred, b);
    // A per-batch value known in advance: the batch index (0 and 1 in each epoch).
    o.metrics.emplace_back("batch", torch::tensor(static_cast<double>(c.state().batch_idx)));
    if (c.state().training()) ++steps;
    return o;
  }
  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override { out.set_int("steps", steps); }
  void load_state(const wick::StateDict& in) override { steps = in.get_int("steps"); }

  std::vector<double> seen_pred_sum;
  std::int64_t steps = 0;
};
}  // namespace

TEST_CASE(
    "after_pred sits between forward and loss: a hook's prediction is the one the loss gets") {
  TempDir dir;
  auto task = std::make_shared<MeteredTask>();
  wick::Trainer t(tiny_options(dir), task);
  std::vector<std::string> order;
  t.add_hook(entry("zero_pred", 0, [&](wick::Registrar& r) {
    r.stage(Stage::forward, [&](wick::Context& c, wick::Next next) {
      order.push_back(c.output().pred.defined() ? "forward: pred before" : "forward: none before");
      const bool ok = next();
      order.push_back(c.output().pred.defined() ? "forward: pred after" : "forward: none after");
      return ok;
    });
    r.on(Point::after_pred, [&](wick::Context& c) {
      order.push_back(c.output().loss.defined() ? "after_pred: loss" : "after_pred: no loss");
      c.output().pred = c.output().pred * 0.0;  // still differentiable
    });
    r.on(Point::after_loss, [&](wick::Context& c) {
      order.push_back(c.output().loss.defined() ? "after_loss: loss" : "after_loss: no loss");
    });
  }));
  REQUIRE(t.fit().status == wick::FitResult::Status::completed);
  REQUIRE(order.size() >= 4);
  CHECK(std::vector<std::string>(order.begin(), order.begin() + 4) ==
        std::vector<std::string>{"forward: none before", "forward: pred after",
                                 "after_pred: no loss", "after_loss: loss"});
  // Every loss() call (training and validation) saw the replaced, all-zero prediction.
  REQUIRE(task->seen_pred_sum.size() == 6);
  for (double s : task->seen_pred_sum) CHECK(s == 0.0);
}

TEST_CASE("a hook at after_loss replaces the loss that backward differentiates") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  const auto before = params_of(t.model());
  t.add_hook(entry("no_loss", 0, [](wick::Registrar& r) {
    r.on(Point::after_loss, [](wick::Context& c) {
      if (c.state().training()) c.output().loss = c.output().loss * 0.0;
    });
  }));
  REQUIRE(t.fit().status == wick::FitResult::Status::completed);
  // A zero loss gives zero gradients: Adam leaves the parameters where they were.
  CHECK(params_of(t.model()) == before);
}

TEST_CASE("training metrics of a task are logged as train/NAME means, per window and epoch") {
  TempDir dir;
  auto o = tiny_options(dir);
  o.log_every = 1;
  wick::Trainer t(o, std::make_shared<MeteredTask>());
  REQUIRE(t.fit().status == wick::FitResult::Status::completed);
  auto records = read_jsonl(dir / "run" / "metrics.jsonl");
  std::vector<double> step_values, epoch_values;
  for (const auto& r : records)
    (r["kind"] == "step" ? step_values : epoch_values).push_back(r["train/batch"].get<double>());
  // Batches 0 and 1 of each epoch, one step record each; the epoch record is their mean.
  CHECK(step_values == std::vector<double>{0, 1, 0, 1});
  CHECK(epoch_values == std::vector<double>{0.5, 0.5});
  // Validation has one batch (index 0) per epoch.
  CHECK(records.back()["valid/batch"].get<double>() == 0.0);
}

TEST_CASE("a task's own state travels in the framework's checkpoint") {
  TempDir dir;
  auto first_task = std::make_shared<MeteredTask>();
  auto o = tiny_options(dir);
  o.epochs = 1;
  wick::Trainer first(o, first_task);
  REQUIRE(first.fit().status == wick::FitResult::Status::completed);
  REQUIRE(first_task->steps == 2);
  const auto saved = first.context().save_checkpoint((dir / "ckpt").string(), "test");
  CHECK(saved.position == wick::Position{1, 0});
  CHECK(saved.optimizer_step == 2);

  auto second_task = std::make_shared<MeteredTask>();
  o.epochs = 2;
  wick::RunInfo resume;
  resume.resume = (dir / "ckpt").string();  // continues metrics.jsonl rather than starting it
  wick::Trainer second(o, second_task, wick::OptimizerOptions{}, resume);
  second.add_hook(entry("restore", 0, [&](wick::Registrar& r) {
    r.on(Point::before_fit, [&](wick::Context& c) {
      const auto info = c.restore_checkpoint((dir / "ckpt").string());
      CHECK(info.position == wick::Position{1, 0});
      CHECK(second_task->steps == 2);
    });
  }));
  REQUIRE(second.fit().status == wick::FitResult::Status::completed);
  CHECK(second_task->steps == 4);  // resumed at epoch 1: two more steps
  CHECK(second.state().optimizer_step == 4);
}

TEST_CASE("after_cancel tells what was cancelled and why") {
  TempDir dir;
  auto run_with = [&](std::function<void(wick::Context&)> at_step) {
    wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
    std::vector<std::string> seen;
    t.add_hook(entry("canceller", 0, [&](wick::Registrar& r) {
      r.on(Point::after_backward, [&](wick::Context& c) {
        if (c.state().epoch == 0 && c.state().batch_idx == 1) at_step(c);
      });
      r.on(Point::after_cancel, [&](wick::Context& c) {
        const auto* why = c.cancellation();
        REQUIRE(why != nullptr);
        seen.push_back(std::string(wick::to_string(why->scope)) + " " +
                       std::string(wick::to_string(why->reason)) + " " + why->message);
      });
      r.on(Point::after_epoch, [&](wick::Context& c) { CHECK(c.cancellation() == nullptr); });
    }));
    auto res = t.fit();
    return std::make_pair(res, seen);
  };
  {
    auto [res, seen] = run_with([](wick::Context&) { throw wick::CancelStep(); });
    CHECK(res.status == wick::FitResult::Status::completed);
    CHECK(seen ==
          std::vector<std::string>{"step CancelStep plugin 'canceller' (instance 'canceller') at "
                                   "after_backward: CancelStep"});
  }
  {
    auto [res, seen] = run_with([](wick::Context&) { throw wick::CancelFit(); });
    CHECK(res.status == wick::FitResult::Status::cancelled);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].rfind("fit CancelFit plugin 'canceller'", 0) == 0);
  }
  {
    auto [res, seen] = run_with([](wick::Context&) { throw std::runtime_error("disk on fire"); });
    CHECK(res.status == wick::FitResult::Status::failed);
    CHECK(seen == std::vector<std::string>{"fit failure plugin 'canceller' (instance "
                                           "'canceller') at after_backward: disk on fire"});
  }
  {
    // Not a std::exception at all: still a failure that names its plugin, never a terminate.
    auto [res, seen] = run_with([](wick::Context&) { throw 42; });
    CHECK(res.status == wick::FitResult::Status::failed);
    CHECK(res.error ==
          "plugin 'canceller' (instance 'canceller') at after_backward: an exception that is "
          "not a std::exception (a plugin threw a non-standard type)");
  }
}

TEST_CASE("LibTorch's backtraces are left out of the messages that wrap its errors") {
  std::string what;
  try {
    TORCH_CHECK(false, "a size it refused");
  } catch (const c10::Error& e) {
    what = e.what();
  }
  // Each wrapper (a plugin's save_state, its constructor) kept tens of "frame #" lines.
  const std::string wrapped = "plugin 'p' cannot save its state: " + what;
  CHECK(wick::without_backtraces(wrapped) == "plugin 'p' cannot save its state: a size it refused");
  CHECK(wick::without_backtraces(wrapped + " (more words); then " + wrapped) ==
        "plugin 'p' cannot save its state: a size it refused (more words); then plugin 'p' "
        "cannot save its state: a size it refused");
  const std::string made_up =
      "bad\nException raised from f at a.cpp:1 (most recent call first):\nframe #0: f()\n"
      "frame #1: g()\n";
  CHECK(wick::without_backtraces(made_up + "next line") == "bad\nnext line");
  CHECK(wick::without_backtraces("no backtrace here") == "no backtrace here");
}

TEST_CASE("weights a hook offers that do not fit the model: model.pt keeps the trained ones") {
  // An offer of another shape, or another dtype, would leave a model.pt no one can load; one
  // that throws (not even a std::exception) ended the process after a whole fit.
  for (const std::string kind : {"shape", "dtype", "throw"}) {
    const bool shape = kind == "shape";
    DYNAMIC_SECTION(kind) {
      struct Offer : wick::Hook {
        std::string kind;
        bool shape = true;
        void connect(wick::Registrar&) override {}
        std::string eval_weights(const torch::nn::Module& m,
                                 wick::NamedTensors& out) const override {
          if (kind == "throw") throw 42;
          const auto p = m.named_parameters()[0];
          out.emplace_back(p.key(), shape ? torch::zeros({1, 1}) : p.value().to(torch::kLong));
          return "bad";
        }
      };
      TempDir dir;
      wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
      auto offer = std::make_shared<Offer>();
      offer->shape = shape;
      offer->kind = kind;
      wick::HookEntry e;
      e.hook = offer;
      e.plugin = e.instance = "offer";
      t.add_hook(e);
      const auto before = params_of(t.model());
      const auto res = t.fit();
      CHECK(res.status == wick::FitResult::Status::failed);
      CHECK_THAT(res.error, Catch::Contains("(model.pt holds the trained weights)"));
      if (kind == "throw")
        CHECK_THAT(res.error, Catch::Contains("plugin 'offer' (instance 'offer') failed to offer "
                                              "its weights for evaluation (eval_weights): an "
                                              "exception that is not a std::exception"));
      else
        CHECK_THAT(res.error, Catch::Contains("hook 'offer' offers '") &&
                                  Catch::Contains(shape ? "[1, 1] Float for evaluation"
                                                        : "] Long for evaluation"));
      CHECK(res.model_weights == "trained");
      // What the file holds: the trained weights, which a model of the run loads.
      wick::Trainer other(tiny_options(dir), std::make_shared<TinyTask>());
      other.load_model_file((dir / "run" / "model.pt").string());
      CHECK(params_of(other.model()) == params_of(t.model()));
      CHECK(params_of(other.model()) != before);
    }
  }
}

TEST_CASE("summary.json says running while a fit runs, never an earlier run's result") {
  TempDir dir;
  fs::create_directories(dir / "run");
  write_file(dir / "run" / "summary.json", "{\"status\": \"completed\"}\n");
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  std::string during;
  t.add_hook(entry("peek", 0, [&](wick::Registrar& r) {
    r.on(Point::before_epoch,
         [&](wick::Context&) { during = read_json(dir / "run" / "summary.json")["status"]; });
  }));
  REQUIRE(t.fit().status == wick::FitResult::Status::completed);
  CHECK(during == "running");
  CHECK(read_json(dir / "run" / "summary.json")["status"] == "completed");
}

TEST_CASE("stage order by capability: a handler that needs one runs after its providers") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  t.add_hook(entry("clipper", -3, [](wick::Registrar& r) {
    r.stage(Stage::optimizer_step, [](wick::Context&, wick::Next n) { return n(); });
    r.needs(Stage::optimizer_step, "reduced_gradients", "it must clip the all-reduced gradient");
  }));
  t.add_hook(entry("reducer", 4, [](wick::Registrar& r) {
    r.stage(Stage::optimizer_step, [](wick::Context&, wick::Next n) { return n(); });
    r.provides(Stage::optimizer_step, "reduced_gradients");
  }));
  CHECK_THROWS_WITH(t.connect(),
                    "hook 'clipper' (order -3) runs before 'reducer' (order 4) in the "
                    "optimizer_step stage, but it needs reduced_gradients, which 'reducer' "
                    "provides (it must clip the all-reduced gradient); give 'clipper' an order "
                    "greater than 4 (e.g. order = 5 in its [[hooks]] table)");
}

TEST_CASE(
    "capabilities: the built-in ones order alike by enum or by name and a misspelt one is "
    "refused with the name meant while a plugin's own name passes") {
  auto pass = [](wick::Context&, wick::Next n) { return n(); };
  {
    // The enum and the string name one capability: the order check sees them as one.
    TempDir dir;
    wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
    t.add_hook(entry("scaler", 2, [&](wick::Registrar& r) {
      r.stage(Stage::optimizer_step, pass);
      r.provides(Stage::optimizer_step, "unscaled_gradients");
    }));
    t.add_hook(entry("clipper", 1, [&](wick::Registrar& r) {
      r.stage(Stage::optimizer_step, pass);
      r.needs(Stage::optimizer_step, wick::Capability::unscaled_gradients, "it clips true values");
    }));
    CHECK_THROWS_WITH(t.connect(),
                      Catch::StartsWith("hook 'clipper' (order 1) runs before 'scaler' (order 2)"));
  }
  {
    TempDir dir;
    wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
    t.add_hook(entry("clipper", 0, [&](wick::Registrar& r) {
      r.stage(Stage::optimizer_step, pass);
      r.needs(Stage::optimizer_step, "reduced_gradient", "it must clip the all-reduced gradient");
    }));
    CHECK_THROWS_WITH(t.connect(),
                      "hook 'clipper' (plugin 'clipper') needs 'reduced_gradient' in the "
                      "optimizer_step stage, which is not a capability; did you mean "
                      "'reduced_gradients'? (wick::Capability::reduced_gradients in the plugin's "
                      "connect())");
  }
  {
    // A capability of the plugins' own, provided and needed in order.
    TempDir dir;
    wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
    t.add_hook(entry("maker", 0, [&](wick::Registrar& r) {
      r.stage(Stage::optimizer_step, pass);
      r.provides(Stage::optimizer_step, "sparsified_gradients");
    }));
    t.add_hook(entry("user", 1, [&](wick::Registrar& r) {
      r.stage(Stage::optimizer_step, pass);
      r.needs(Stage::optimizer_step, "sparsified_gradients", "it reads the mask");
    }));
    CHECK_NOTHROW(t.connect());
  }
}

TEST_CASE("a hook reaches its task typed") {
  TempDir dir;
  auto task = std::make_shared<MeteredTask>();
  wick::Trainer t(tiny_options(dir), task);
  CHECK(&t.context().task<MeteredTask>() == task.get());
  CHECK(&t.context().task<TinyTask>() == task.get());
  wick::Trainer other(tiny_options(dir), std::make_shared<TinyTask>());
  CHECK_THROWS_AS(other.context().task<MeteredTask>(), std::logic_error);
}

TEST_CASE("a task subscribes to points and stages itself, scheduled as 'task'") {
  // Records every point, counts its optimizer_step handler's calls, and throws at after_fit
  // when asked (the error must be blamed on the task).
  class Subscriber : public TinyTask {
   public:
    std::vector<std::string> log;
    int steps = 0;
    bool fail = false;
    void connect(wick::Registrar& r) override {
      record_all(log)(r);
      r.stage(Stage::optimizer_step, [this](wick::Context&, wick::Next next) {
        ++steps;
        return next();
      });
      r.on(Point::after_fit, [this](wick::Context&) {
        if (fail) throw std::runtime_error("task's after_fit failed");
      });
    }
  };
  TempDir dir;
  auto task = std::make_shared<Subscriber>();
  wick::Trainer t(tiny_options(dir), task);
  std::vector<std::string> hook_log;
  t.add_hook(entry("early", -1, record_all(hook_log)));
  const auto md = t.describe();
  CHECK(md.find("| optimizer_step | task(0) -> default: optimizer.step()") != std::string::npos);
  auto res = t.fit();
  REQUIRE(res.status == wick::FitResult::Status::completed);
  CHECK(task->log == kTwoEpochs);
  CHECK(hook_log == kTwoEpochs);
  CHECK(task->steps == 4);

  TempDir dir2;
  auto failing = std::make_shared<Subscriber>();
  failing->fail = true;
  wick::Trainer t2(tiny_options(dir2), failing);
  auto res2 = t2.fit();
  CHECK(res2.status == wick::FitResult::Status::failed);
  CHECK(res2.error.find("'task'") != std::string::npos);
  CHECK(res2.error.find("task's after_fit failed") != std::string::npos);
}

namespace {
// Every read of a tensor's value into the host (Tensor::item, a tensor in a condition, the
// non-finite check's) is LibTorch's aten::_local_scalar_dense, which on a GPU waits for the
// device's queued work. Counted here, on the CPU, by a RecordFunction observer.
std::atomic<int> host_reads{0};
struct CountHostReads {
  at::CallbackHandle handle =
      at::addGlobalCallback(at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                                           -> std::unique_ptr<at::ObserverContext> {
                              if (std::strcmp(fn.name(), "aten::_local_scalar_dense") == 0)
                                ++host_reads;
                              return nullptr;
                            }).scopes({at::RecordScope::FUNCTION}));
  ~CountHostReads() { at::removeCallback(handle); }
};
}  // namespace

TEST_CASE("a training step reads no value back from the device, its losses are read per record") {
  CountHostReads counting;
  const int before = host_reads;
  (void)torch::ones({1}).item<float>();
  REQUIRE(host_reads == before + 1);  // the observer sees a read

  TempDir dir;
  auto o = tiny_options(dir);
  o.batch_size = 1;  // 8 steps an epoch, 16 in all
  o.log_every = 4;
  REQUIRE(o.nan_policy == wick::NanPolicy::error);  // the default, checked without a wait
  wick::Trainer t(o, std::make_shared<TinyTask>());
  int at_start = 0;
  std::vector<int> per_step;
  t.add_hook(entry("count", 0, [&](wick::Registrar& r) {
    r.on(Point::before_step, [&](wick::Context& c) {
      if (c.state().training()) at_start = host_reads;
    });
    r.on(Point::after_step, [&](wick::Context& c) {
      if (c.state().training()) per_step.push_back(host_reads - at_start);
    });
  }));
  REQUIRE(t.fit().status == wick::FitResult::Status::completed);
  REQUIRE(per_step.size() == 16);
  int at_records = 0;
  for (std::size_t i = 0; i < per_step.size(); ++i) {
    INFO("step " << i);
    if ((i + 1) % 4 == 0) {
      CHECK(per_step[i] <= 1);  // the record's one read of the losses since the last
      at_records += per_step[i];
    } else {
      CHECK(per_step[i] == 0);
    }
  }
  CHECK(at_records == 4);  // the check did read, once per record
}

TEST_CASE("nan_policy error: a non-finite loss found later names its step and is never saved") {
  TempDir dir;
  auto o = tiny_options(dir);
  o.batch_size = 1;
  o.log_every = 4;
  wick::Trainer t(o, std::make_shared<TinyTask>());
  bool saved = false;
  t.add_hook(entry("nan_then_save", 0, [&](wick::Registrar& r) {
    r.on(Point::after_loss, [](wick::Context& c) {
      if (c.state().training() && c.state().batch_idx == 1)
        c.output().loss = c.output().loss * std::nan("");
    });
    // Batch 2, before any record: the checkpoint reads the losses kept since the last check.
    r.on(Point::after_step, [&](wick::Context& c) {
      if (c.state().training() && c.state().batch_idx == 2) {
        c.save_checkpoint("ck", "test");
        saved = true;
      }
    });
  }));
  auto res = t.fit();
  CHECK(res.status == wick::FitResult::Status::failed);
  CHECK_THAT(res.error, Catch::Matchers::Contains(
                            "non-finite loss (nan) at epoch 0, batch 1, optimizer step 1; set "
                            "trainer.nan_policy = \"skip\" to skip such steps (found at batch 2"));
  CHECK_FALSE(saved);
  CHECK_FALSE(fs::exists(dir / "run" / "ck"));
  CHECK_FALSE(fs::exists(dir / "run" / "model.pt"));  // the weights took a NaN step
  CHECK(read_jsonl(dir / "run" / "metrics.jsonl").empty());
  // Nor is a checkpoint asked for afterwards (an on_failure save, here by hand).
  CHECK_THROWS_WITH(t.context().save_checkpoint("ck2", "failure"),
                    "not saving checkpoint 'ck2' (failure): the weights have taken steps since "
                    "a non-finite loss");
  CHECK_FALSE(fs::exists(dir / "run" / "ck2"));
}

TEST_CASE(
    "a checkpoint is restored in before_fit only: later, or after it failed, the fit fails saying "
    "so") {
  TempDir dir;
  wick::Trainer t(tiny_options(dir), std::make_shared<TinyTask>());
  bool between = false;
  t.add_hook(entry("restorer", 0, [&](wick::Registrar& r) {
    // before_fit counts as between steps (a checkpoint may be saved there), as before.
    r.on(Point::before_fit, [&](wick::Context& c) { between = c.between_steps(); });
    r.on(Point::before_epoch,
         [](wick::Context& c) { c.restore_checkpoint((c.run().output_dir + "/nowhere")); });
  }));
  const auto res = t.fit();
  CHECK(between);
  CHECK(res.status == wick::FitResult::Status::failed);
  CHECK(res.error ==
        "plugin 'restorer' (instance 'restorer') at before_epoch: restore_checkpoint is only "
        "possible in before_fit");
  // Nor after a before_fit that failed: after_cancel finds the loop out of before_fit.
  TempDir dir2;
  wick::Trainer t2(tiny_options(dir2), std::make_shared<TinyTask>());
  t2.add_hook(entry("failing", 0, [&](wick::Registrar& r) {
    r.on(Point::before_fit, [](wick::Context&) { throw std::runtime_error("no start"); });
    r.on(Point::after_cancel,
         [](wick::Context& c) { c.restore_checkpoint((c.run().output_dir + "/nowhere")); });
  }));
  const auto res2 = t2.fit();
  CHECK(res2.status == wick::FitResult::Status::failed);
  CHECK(res2.error ==
        "plugin 'failing' (instance 'failing') at before_fit: no start; then plugin 'failing' "
        "(instance 'failing') at after_cancel: restore_checkpoint is only possible in "
        "before_fit");
}
