// wick::cross_entropy (wick/losses.hpp), wick::gelu_tanh and wick::gelu_mlp
// (wick/activations.hpp), wick::linear's function (wick/linear.hpp) and
// wick::scaled_dot_product_attention (wick/attention.hpp) on the CPU, the training-algorithm
// plugins
// (label_smoothing, mixup, cutmix, sam, swa, freeze) and the speed plugins (channels_last,
// mixed_precision dtype = "auto") on tiny classifiers, checked
// against references computed here from the closed forms; then exact resume with each on,
// through `wick fit`.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>

#include <wick/activations.hpp>
#include <wick/attention.hpp>
#include <wick/autocast.hpp>
#include <wick/config.hpp>
#include <wick/hardware.hpp>
#include <wick/linear.hpp>
#include <wick/loader.hpp>
#include <wick/losses.hpp>
#include <wick/normalization.hpp>
#include <wick/task.hpp>
#include <wick/trainer.hpp>

#include "cuda/own_kernels.hpp"
#include "in_process.hpp"
#include "ops/gelu_mlp.hpp"
#include "ops/linear.hpp"
#include "optim/bf16_copies.hpp"
#include "support.hpp"

using namespace wick;
using Catch::Matchers::Contains;
using wick::test::entry;
using wick::test::load_hooks;
using wick::test::options;
using wick::test::TempDir;

namespace {

constexpr std::int64_t kClasses = 3;

// Fixed random images [n, 1, side, side] (or flat [n, side * side]) with labels 0..2.
//   linear: Flatten, Linear(side^2, 3)
//   conv:   Conv2d(1, 2, 3, padding 1), Flatten, Linear(2 side^2, 3)
//   bn:     Flatten, Linear(side^2, 4), BatchNorm1d(4), Linear(4, 3)
class ImageTask : public Task {
 public:
  enum class Net { linear, conv, bn };
  ImageTask(std::int64_t n, std::int64_t side, Net net, std::int64_t valid = 0, bool flat = false,
            torch::Dtype dtype = torch::kFloat)
      : side_(side), net_kind_(net), dtype_(dtype) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    auto shape = [&](std::int64_t m) {
      return flat ? std::vector<std::int64_t>{m, side * side}
                  : std::vector<std::int64_t>{m, 1, side, side};
    };
    x_ = torch::randn(shape(n), gen).to(dtype);
    y_ = torch::randint(kClasses, {n}, gen, torch::kLong);
    train_ = std::make_shared<TensorDataset>(x_, y_);
    if (valid > 0) {
      vx_ = torch::randn(shape(valid), gen).to(dtype);
      valid_ = std::make_shared<TensorDataset>(vx_, torch::randint(kClasses, {valid}, gen));
    }
  }
  std::shared_ptr<torch::nn::Module> model() override {
    namespace nn = torch::nn;
    const auto d = side_ * side_;
    net_ = nn::Sequential();
    if (net_kind_ == Net::conv) {
      net_->push_back(nn::Conv2d(nn::Conv2dOptions(1, 2, 3).padding(1)));
      net_->push_back(nn::Flatten());
      net_->push_back(nn::Linear(2 * d, kClasses));
    } else if (net_kind_ == Net::bn) {
      net_->push_back(nn::Flatten());
      net_->push_back(nn::Linear(d, 4));
      net_->push_back(nn::BatchNorm1d(4));
      net_->push_back(nn::Linear(4, kClasses));
    } else {
      net_->push_back(nn::Flatten());
      net_->push_back(nn::Linear(d, kClasses));
    }
    net_->to(dtype_);
    return net_.ptr();
  }
  std::shared_ptr<Dataset> train_data() override { return train_; }
  std::shared_ptr<Dataset> valid_data() override { return valid_; }
  at::Tensor forward(Context& c, const Batch& b) override {
    auto pred = net_->forward(b.input);
    if (on_forward) on_forward(c, b.input, pred);
    return pred;
  }
  Output loss(Context& c, const at::Tensor& pred, const Batch& b) override {
    return classification_loss(pred, b.target, c.state().validating());
  }

  at::Tensor x_, y_, vx_;
  std::function<void(Context&, const at::Tensor& input, const at::Tensor& pred)> on_forward;
  torch::nn::Sequential net_{nullptr};

 private:
  std::int64_t side_;
  Net net_kind_;
  torch::Dtype dtype_;
  std::shared_ptr<TensorDataset> train_, valid_;
};

// An in-test hook with a function per point.
struct Probe : Hook {
  std::map<Point, std::function<void(Context&)>> points;
  void connect(Registrar& r) override {
    for (auto& [p, fn] : points) r.on(p, fn);
  }
};

OptimizerOptions sgd(double lr) {
  OptimizerOptions o;
  o.kind = wick::OptimizerKind::sgd;
  o.lr = lr;
  return o;
}

std::unique_ptr<Trainer> make(const std::shared_ptr<Task>& task, TrainerOptions o,
                              OptimizerOptions opt, const std::string& hooks) {
  auto t = std::make_unique<Trainer>(std::move(o), task, std::move(opt));
  if (!hooks.empty())
    for (auto& h : load_hooks(hooks)) t->add_hook(std::move(h));
  return t;
}

// The error of a fit that must fail.
std::string fit_error(const std::shared_ptr<Task>& task, TrainerOptions o,
                      const std::string& hooks) {
  auto t = make(task, std::move(o), sgd(0.1), hooks);
  auto r = t->fit();
  CHECK(r.status == FitResult::Status::failed);
  return r.error;
}

// ---- hand references (plain loops over the numbers) ----------------------------------------

std::vector<double> values(const at::Tensor& t) {
  auto c = t.to(torch::kDouble).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// -log softmax(z_i)[k] for logits [n, C].
double nll(const std::vector<double>& z, std::int64_t i, std::int64_t k) {
  double m = -1e300, s = 0;
  for (std::int64_t j = 0; j < kClasses; ++j) m = std::max(m, z[i * kClasses + j]);
  for (std::int64_t j = 0; j < kClasses; ++j) s += std::exp(z[i * kClasses + j] - m);
  return m + std::log(s) - z[i * kClasses + k];
}

// Cross-entropy: the mean over the batch of -log p(target).
double ce(const at::Tensor& logits, const at::Tensor& target) {
  const auto z = values(logits);
  const auto y = values(target);
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    s += nll(z, static_cast<std::int64_t>(i), static_cast<std::int64_t>(y[i]));
  return s / static_cast<double>(y.size());
}

// The uniform term of label smoothing: the mean over the batch and classes of -log p.
double uniform_term(const at::Tensor& logits) {
  const auto z = values(logits);
  const auto n = logits.size(0);
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < kClasses; ++k) s += nll(z, i, k);
  return s / static_cast<double>(n * kClasses);
}

// Closed-form gradient of the cross-entropy of z = x W^T + b: D = (softmax(z) - onehot) / n,
// dW = D^T x, db = sum_i D_i.
std::pair<at::Tensor, at::Tensor> ce_grad(const at::Tensor& w, const at::Tensor& b,
                                          const at::Tensor& x, const at::Tensor& y) {
  auto xf = x.reshape({x.size(0), -1}).to(torch::kDouble);
  auto z = xf.matmul(w.to(torch::kDouble).t()) + b.to(torch::kDouble);
  auto p = z.exp() / z.exp().sum(1, true);
  auto d = (p - torch::one_hot(y, kClasses).to(torch::kDouble)) / static_cast<double>(x.size(0));
  return {d.t().matmul(xf), d.sum(0)};
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Every permutation of 0..n-1 (n small).
std::vector<std::vector<std::int64_t>> permutations(std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::vector<std::vector<std::int64_t>> out;
  do out.push_back(p);
  while (std::next_permutation(p.begin(), p.end()));
  return out;
}

at::Tensor take(const at::Tensor& t, const std::vector<std::int64_t>& perm) {
  return t.index_select(0, torch::tensor(perm, torch::kLong));
}

// What the model saw and what the loss was, for each training step.
struct Seen {
  std::vector<at::Tensor> inputs, preds, valid_inputs;
  std::vector<double> losses;
};
void watch(Trainer& t, ImageTask& task, Seen& seen) {
  task.on_forward = [&seen](Context& c, const at::Tensor& in, const at::Tensor&) {
    (c.state().training() ? seen.inputs : seen.valid_inputs).push_back(in.detach().clone());
  };
  auto probe = std::make_shared<Probe>();
  probe->points[Point::after_loss] = [&seen](Context& c) {
    if (!c.state().training()) return;
    seen.preds.push_back(c.output().pred.detach().clone());
    seen.losses.push_back(c.output().loss.item<double>());
  };
  t.add_hook(entry(probe, "probe", 50));
}

// mixup's draw, recovered from the mixed batch m of x: the permutation and lam with
// m = lam x + (1 - lam) x[perm].
struct Mix {
  std::vector<std::int64_t> perm;
  double lam = 1;
};
Mix recover_mixup(const at::Tensor& m, const at::Tensor& x) {
  for (const auto& perm : permutations(x.size(0))) {
    auto xp = take(x, perm);
    auto dx = (x - xp).to(torch::kDouble), dm = (m - xp).to(torch::kDouble);
    const double nn = (dx * dx).sum().item<double>();
    if (nn == 0) continue;  // the identity
    const double lam = (dm * dx).sum().item<double>() / nn;
    if (max_diff(m, lam * x + (1 - lam) * xp) < 1e-5) return {perm, lam};
  }
  FAIL("the mixed batch is no lam x + (1 - lam) x[perm]");
  return {};
}

}  // namespace

// ---- wick::cross_entropy ------------------------------------------------------------------

namespace {

// The largest error of a bf16 result against a double reference, in half units in the last
// place of bf16 (2^-8 relative), less float's own error (2e-6 of the largest value): 1 or less
// for results computed in float and rounded to nearest once; truncation reaches 2.
double bf16_error(const at::Tensor& got, const at::Tensor& want) {
  const auto w = want.to(torch::kDouble);
  const auto half_ulp = at::exp2(at::floor(at::log2(w.abs().clamp_min(1e-30))) - 8);
  const auto err = (got.to(torch::kDouble) - w).abs() - 2e-6 * w.abs().max();
  return (err / half_ulp).max().item<double>();
}

}  // namespace

// Float32 on the CPU runs wick's kernel, compiled for AVX-512, AVX2 and the baseline: ctest
// runs this again as an AVX2-only CPU and as one without AVX2 ([cpu-path], [cpu-kernels]).
TEST_CASE("wick::cross_entropy: mean of log-sum-exp minus the target's logit, ignored rows out",
          "[algorithms][losses][cpu-kernels][cpu-path]") {
  // Rows [0, 1, 2] -> target 2, [1, 1, 1] -> ignored (-100), [3, 0, -1] -> target 0.
  const auto logits =
      torch::tensor({0.0, 1.0, 2.0, 1.0, 1.0, 1.0, 3.0, 0.0, -1.0}, torch::kFloat).reshape({3, 3});
  const auto target = torch::tensor({2, -100, 0}, torch::kInt);
  auto lse = [](std::vector<double> x) {
    double s = 0;
    for (double v : x) s += std::exp(v);
    return std::log(s);
  };
  const double l0 = lse({0, 1, 2}), l2 = lse({3, 0, -1});
  const double want = ((l0 - 2) + (l2 - 3)) / 2;

  auto x = logits.clone().requires_grad_(true);
  const auto loss = wick::cross_entropy(x, target);
  CHECK(loss.scalar_type() == torch::kFloat);
  CHECK(std::abs(loss.item<double>() - want) < 1e-6);
  loss.backward();
  // d/dx: (softmax - onehot) / 2 on the two rows counted, 0 on the ignored one.
  const std::vector<std::vector<double>> rows = {{0, 1, 2}, {1, 1, 1}, {3, 0, -1}};
  const std::vector<double> l = {l0, 0, l2};
  const std::vector<int> t = {2, -1, 0};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      const double g = r == 1 ? 0 : (std::exp(rows[r][c] - l[r]) - (c == t[r] ? 1 : 0)) / 2;
      INFO("row " << r << ", class " << c);
      CHECK(std::abs(x.grad()[r][c].item<double>() - g) < 1e-6);
    }

  // Leading dimensions [2, 1, 3] and bf16 logits: the loss still in float.
  const auto bf =
      wick::cross_entropy(logits.reshape({3, 1, 3}).to(torch::kBFloat16), target.reshape({3, 1}));
  CHECK(bf.scalar_type() == torch::kFloat);
  CHECK(std::abs(bf.item<double>() - want) < 2e-2 * want);
  CHECK_THROWS_WITH(wick::cross_entropy(logits, torch::tensor({0, 1}, torch::kLong)),
                    Contains("logits [..., classes] and integer targets [...] of the same "
                             "leading shape on one device") &&
                        Contains("[3, 3]") && Contains("[2]"));
  CHECK_THROWS_WITH(wick::cross_entropy(logits, torch::zeros({3})), Contains("Float targets"));
  CHECK_THROWS_WITH(wick::cross_entropy(logits, torch::tensor({2, 3, 0})),
                    Contains("target 3 at position 1 is not a class id in [0, 3)"));

  // Wide rows (a remainder past any vector width), logits far from 0, an ignored row: against
  // the log-softmax and NLL composition in double.
  torch::manual_seed(3);
  const auto wide = torch::randn({5, 1001}, torch::kFloat) * 8 + 40;
  const auto ids = torch::tensor({7, 1000, -100, 0, 500});
  auto w = wide.clone().requires_grad_(true);
  auto wd = wide.to(torch::kDouble).requires_grad_(true);
  const auto got = wick::cross_entropy(w, ids);
  const auto ref = at::nll_loss(at::log_softmax(wd, -1), ids, {}, at::Reduction::Mean, -100);
  CHECK(std::abs(got.item<double>() - ref.item<double>()) < 1e-5 * ref.item<double>());
  got.backward();
  ref.backward();
  CHECK((w.grad().to(torch::kDouble) - wd.grad()).abs().max().item<double>() < 2e-7);
  CHECK(w.grad()[2].abs().max().item<float>() == 0);

  // Many rows: the same bits on 1 thread and on 2 (at::sum split the mean's reduction).
  {
    const auto big = torch::randn({200000, 5});
    const auto big_ids = torch::randint(0, 5, {200000}, torch::kLong);
    const int threads = at::get_num_threads();
    at::set_num_threads(1);
    const auto one = wick::cross_entropy(big, big_ids);
    at::set_num_threads(2);
    const auto two = wick::cross_entropy(big, big_ids);
    at::set_num_threads(threads);
    CHECK(torch::equal(one, two));
  }

  // A +inf logit: the loss and every gradient NaN, as LibTorch's (inf - inf), not a loss of
  // +inf that a check for NaN alone would miss.
  auto inf = torch::tensor({{1.f, 2.f, INFINITY, 0.5f}}).requires_grad_(true);
  const auto inf_loss = wick::cross_entropy(inf, torch::tensor({1}));
  CHECK(std::isnan(inf_loss.item<float>()));
  inf_loss.backward();
  CHECK(inf.grad().isnan().all().item<bool>());

  // bf16 logits (as a bf16-autocast model hands them over): computed in float, the loss in
  // float, the gradient in bf16 rounded once.
  auto wb = wide.to(torch::kBFloat16).requires_grad_(true);
  auto wbd = wb.detach().to(torch::kDouble).requires_grad_(true);
  const auto got_b = wick::cross_entropy(wb, ids);
  const auto ref_b = at::nll_loss(at::log_softmax(wbd, -1), ids, {}, at::Reduction::Mean, -100);
  CHECK(got_b.scalar_type() == torch::kFloat);
  CHECK(std::abs(got_b.item<double>() - ref_b.item<double>()) < 1e-5 * ref_b.item<double>());
  got_b.backward();
  ref_b.backward();
  CHECK(wb.grad().scalar_type() == torch::kBFloat16);
  CHECK(bf16_error(wb.grad(), wbd.grad()) <= 1);
}

namespace {

// GELU's tanh approximation and its derivative in double, from the formula.
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_slope(double x) {
  const double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

}  // namespace

// [cpu-path]: the kernel is compiled for AVX-512, AVX2 and the baseline and picks by the CPU;
// ctest runs this again as an AVX2-only CPU and as one without AVX2 ([cpu-kernels]).
TEST_CASE("wick::gelu_tanh matches GELU's tanh formula and its derivative",
          "[algorithms][activations][cpu-kernels][cpu-path]") {
  // A sweep over [-12, 12] (both tails, where the kernel's exponential clamps), a length that
  // leaves a remainder past any vector width, and the edges: 0, -0, huge, infinite, NaN.
  const std::int64_t n = 4099;
  auto x = torch::linspace(-12, 12, n, torch::kFloat);
  x = torch::cat({x, torch::tensor({0.f, -0.f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN})});
  auto xg = x.clone().requires_grad_(true);
  const auto y = wick::gelu_tanh(xg);
  const auto dy = torch::linspace(-1, 1, x.numel(), torch::kFloat);
  y.backward(dy);
  const auto xs = x.accessor<float, 1>(), ys = y.accessor<float, 1>(),
             gs = xg.grad().accessor<float, 1>(), dys = dy.accessor<float, 1>();
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = xs[i], want = gelu_tanh_ref(v), slope = gelu_tanh_slope(v);
    INFO("x = " << v);
    CHECK(std::abs(ys[i] - want) <= 2e-6 * std::max(1.0, std::abs(want)));
    CHECK(std::abs(gs[i] - dys[i] * slope) <= 4e-6 * std::max(1.0, std::abs(dys[i] * slope)));
  }
  // 0 and -0 map to 0, 1e30 and infinity to themselves with slope 1, -1e30 to 0 with slope 0;
  // -infinity gives NaN as in at::gelu (-inf x 0) with slope 0, and NaN stays NaN.
  const std::vector<float> want = {0, 0, 1e30f, 0, INFINITY};
  const std::vector<float> slope = {0.5f, 0.5f, 1, 0, 1, 0};
  for (std::size_t k = 0; k < slope.size(); ++k) {
    const auto i = n + static_cast<std::int64_t>(k);
    INFO("x = " << xs[i]);
    if (k < want.size()) CHECK(ys[i] == want[k]);
    CHECK(std::abs(gs[i] - dys[i] * slope[k]) <= 1e-6 * std::abs(dys[i]));
  }
  CHECK(std::isnan(ys[n + 5]));
  CHECK(std::isnan(ys[n + 6]));
  CHECK(std::isnan(gs[n + 6]));
  // bf16 (under bf16 autocast): computed in float from the exact bf16 inputs, each result
  // rounded to nearest once; NaN stays NaN. The sweep without the edges, whose limits above
  // hold alike.
  auto xb = x.to(torch::kBFloat16).requires_grad_(true);
  const auto yb = wick::gelu_tanh(xb);
  yb.backward(dy.to(torch::kBFloat16));
  const auto sweep = xb.detach().to(torch::kDouble).slice(0, 0, n);
  const auto dyb = dy.to(torch::kBFloat16).to(torch::kDouble).slice(0, 0, n);
  auto want_y = sweep.clone(), want_g = sweep.clone();
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = sweep[i].item<double>();
    want_y[i] = gelu_tanh_ref(v);
    want_g[i] = dyb[i].item<double>() * gelu_tanh_slope(v);
  }
  CHECK(yb.scalar_type() == torch::kBFloat16);
  CHECK(bf16_error(yb.slice(0, 0, n), want_y) <= 1);
  CHECK(bf16_error(xb.grad().slice(0, 0, n), want_g) <= 1);
  CHECK(std::isnan(yb[n + 6].item<float>()));
  // Not contiguous: the values of the contiguous copy. Other types: at::gelu itself.
  const auto wide = torch::randn({64, 6}, torch::kFloat);
  CHECK(torch::equal(wick::gelu_tanh(wide.t()), wick::gelu_tanh(wide.t().contiguous())));
  const auto dbl = wide.to(torch::kDouble);
  CHECK(torch::equal(wick::gelu_tanh(dbl), at::gelu(dbl, "tanh")));
}

namespace {

// The largest difference from a reference in double, relative to the reference's largest value.
double rel(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() /
         want.abs().max().item<double>();
}

}  // namespace

// gelu_mlp's autograd function is what a GPU in bf16 takes, with cuBLASLt's epilogues there
// (test_cuda); here its own backward (four products, GELU's derivative, the bias sums) is
// checked on the CPU against autograd through the three operations in double.
TEST_CASE("wick::gelu_mlp's autograd function: linear, GELU, linear and their gradients",
          "[algorithms][activations]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto x = torch::randn({2, 5, 16}, gen), w1 = torch::randn({24, 16}, gen) / 4,
             b1 = torch::randn({24}, gen), w2 = torch::randn({8, 24}, gen) / 5,
             b2 = torch::randn({8}, gen), dy = torch::randn({2, 5, 8}, gen);
  std::vector<at::Tensor> want;
  {
    std::vector<at::Tensor> in;
    for (const auto& t : {x, w1, b1, w2, b2}) in.push_back(t.to(torch::kDouble).requires_grad_());
    const auto y = at::linear(at::gelu(at::linear(in[0], in[1], in[2]), "tanh"), in[3], in[4]);
    y.backward(dy.to(torch::kDouble));
    want.push_back(y.detach());
    for (const auto& t : in) want.push_back(t.grad());
  }
  for (const auto type : {torch::kFloat, torch::kBFloat16}) {
    INFO("computed in " << type);
    std::vector<at::Tensor> in;
    for (const auto& t : {x, w1, b1, w2, b2}) in.push_back(t.clone().requires_grad_());
    const auto y = gelu_mlp_in(type, in[0], in[1], in[2], in[3], in[4]);
    REQUIRE(y.sizes() == want[0].sizes());
    CHECK(y.scalar_type() == type);
    CHECK_FALSE(y.is_view());  // changeable in place, as at::linear's result
    y.backward(dy.to(type));
    // bf16: the inputs, both products and the GELU rounded to bf16 (2^-8 each).
    const double tol = type == torch::kFloat ? 1e-5 : 3e-2;
    CHECK(rel(y, want[0]) < tol);
    for (std::size_t i = 0; i < in.size(); ++i) {
      INFO("the gradient of input " << i);
      CHECK(in[i].grad().scalar_type() == torch::kFloat);  // each in its input's type
      CHECK(rel(in[i].grad(), want[i + 1]) < tol);
    }
  }
  // An input without a gradient gets none; the others are those above.
  auto w2g = w2.clone().requires_grad_();
  gelu_mlp_in(torch::kFloat, x, w1, b1, w2g, b2).backward(dy);
  CHECK(rel(w2g.grad(), want[4]) < 1e-5);
  // No second derivative: refused, not computed from products made without a graph.
  auto xg = x.clone().requires_grad_();
  CHECK_THROWS_WITH(torch::autograd::grad({gelu_mlp_in(torch::kFloat, xg, w1, b1, w2, b2).sum()},
                                          {xg}, {}, {}, /*create_graph=*/true),
                    Catch::Contains("no second derivative"));
  // wick::gelu_mlp on the CPU: the three operations, gelu_tanh's kernel among them.
  CHECK(torch::equal(wick::gelu_mlp(x, w1, b1, w2, b2),
                     at::linear(wick::gelu_tanh(at::linear(x, w1, b1)), w2, b2)));
}

// wick::linear's autograd function is what a GPU in bf16 takes (test_cuda: there the weight's
// and bias's gradients come out of the products in float); here its backward against autograd
// through at::linear in double, with and without a bias.
TEST_CASE("wick::linear's autograd function: the product and its gradients in their inputs' types",
          "[algorithms]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const auto x = torch::randn({3, 5, 16}, gen), w = torch::randn({24, 16}, gen) / 4,
             b = torch::randn({24}, gen), dy = torch::randn({3, 5, 24}, gen);
  for (const bool with_bias : {true, false}) {
    std::vector<at::Tensor> ref;
    for (const auto& t : {x, w, b}) ref.push_back(t.to(torch::kDouble).requires_grad_());
    const auto yd = at::linear(ref[0], ref[1], with_bias ? ref[2] : at::Tensor());
    yd.backward(dy.to(torch::kDouble));
    for (const auto type : {torch::kFloat, torch::kBFloat16}) {
      INFO("computed in " << type << (with_bias ? ", with" : ", without") << " a bias");
      auto xg = x.clone().requires_grad_(), wg = w.clone().requires_grad_(),
           bg = b.clone().requires_grad_();
      const auto y = linear_in(type, xg, wg, with_bias ? bg : at::Tensor());
      REQUIRE(y.sizes() == yd.sizes());
      CHECK(y.scalar_type() == type);
      CHECK_FALSE(y.is_view());  // changeable in place, as at::linear's result
      y.backward(dy.to(type));
      // bf16: the inputs and the product rounded to bf16 (2^-8 each).
      const double tol = type == torch::kFloat ? 1e-5 : 2e-2;
      CHECK(rel(y, yd) < tol);
      REQUIRE(xg.grad().scalar_type() == torch::kFloat);  // each in its input's type
      REQUIRE(wg.grad().scalar_type() == torch::kFloat);
      CHECK(rel(xg.grad(), ref[0].grad()) < tol);
      CHECK(rel(wg.grad(), ref[1].grad()) < tol);
      if (with_bias) {
        REQUIRE(bg.grad().scalar_type() == torch::kFloat);
        CHECK(rel(bg.grad(), ref[2].grad()) < tol);
      } else {
        CHECK_FALSE(bg.grad().defined());
      }
    }
  }
  // Inputs without a gradient get none, the others theirs: a frozen weight beside a trained
  // bias (the bias's gradient slot is the third either way).
  auto xg = x.clone().requires_grad_();
  auto bg = b.clone().requires_grad_();
  linear_in(torch::kFloat, x, w, bg).backward(dy);
  CHECK(rel(bg.grad(), dy.to(torch::kDouble).reshape({-1, 24}).sum(0)) < 1e-5);
  linear_in(torch::kFloat, xg, w, b).backward(dy);
  CHECK(rel(xg.grad(), at::matmul(dy.to(torch::kDouble), w.to(torch::kDouble))) < 1e-5);
  // No second derivative: refused, not computed from a weight cast without a graph.
  CHECK_THROWS_WITH(torch::autograd::grad({linear_in(torch::kFloat, xg, w, b).sum()}, {xg}, {}, {},
                                          /*create_graph=*/true),
                    Catch::Contains("no second derivative"));
  // wick::linear on the CPU is at::linear, whose second derivative exists.
  const auto g = torch::autograd::grad({wick::linear(xg, w, b).pow(2).sum()}, {xg}, {}, {},
                                       /*create_graph=*/true);
  CHECK(g[0].requires_grad());
}

// The registry between fused Adam's CUDA kernel, which writes the copies, and the products,
// which read them (optim/bf16_copies.hpp), here on CPU tensors with the test writing each copy
// as the kernel would: the products read it while it holds the weight's value, and a cast once
// anything else changed the weight.
TEST_CASE("bf16 copies of the weights serve the products only while they hold the weights' values",
          "[algorithms]") {
  namespace copies = wick::bf16_copies;
  // WICK_CUDA_DISABLE's set again after the test, whatever it left.
  struct Restore {
    ~Restore() { wick::cuda::set_hidden_own_kernels(wick::cuda::hidden_own_kernels()); }
  } restore;
  wick::cuda::set_hidden_own_kernels(0);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(10);
  const auto x = torch::randn({4, 16}, gen);
  auto w = torch::randn({8, 16}, gen).requires_grad_();
  const auto b = torch::randn({8}, gen);
  // As the kernel after an update: the copy holds the weight, rounded, written through its
  // pointer (which moves no version counter on, as copy_ would).
  const auto step = [&](at::Tensor& p, const at::Tensor& value) {
    auto c = copies::to_write(p);
    REQUIRE(c.defined());
    REQUIRE(value.is_contiguous());
    std::memcpy(c.data_ptr(), value.data_ptr(), value.nbytes());
    copies::written(p);
    return c;
  };
  const auto served = copies::served();
  // Not asked for yet: a cast, and no copy to write.
  CHECK_FALSE(copies::to_write(w).defined());
  CHECK(torch::equal(copies::of(w), w.to(torch::kBFloat16)));
  CHECK(copies::served() == served);
  // Asked for: the next step writes one, and the products read it. (Zeros here, to tell the
  // copy from a cast: x 0^T + b is the bias.)
  const auto c = step(w, torch::zeros({8, 16}, torch::kBFloat16));
  const auto y = linear_in(torch::kBFloat16, x, w, b);
  CHECK(copies::served() == served + 1);
  CHECK(torch::equal(y, b.to(torch::kBFloat16).expand({4, 8})));
  step(w, w.detach().to(torch::kBFloat16));
  CHECK(copies::of(w).data_ptr() == c.data_ptr());  // the same copy, step after step
  CHECK(copies::served() == served + 2);
  // A step that writes the copy again fails a backward through a product that read it before.
  auto xg = x.clone().requires_grad_();
  const auto before = linear_in(torch::kBFloat16, xg, w, b);
  step(w, w.detach().to(torch::kBFloat16));
  CHECK_THROWS_WITH(before.sum().backward(), Contains("modified by an inplace operation"));
  // Changed in place by anything else (a restore, SAM, an EMA swap): a cast of the new values.
  {
    torch::NoGradGuard no_grad;
    w.mul_(0.5);
  }
  const auto now = copies::served();
  CHECK(copies::of(w).data_ptr() != c.data_ptr());
  CHECK(torch::equal(copies::of(w), w.to(torch::kBFloat16)));
  CHECK(copies::served() == now);
  // Before the next step's forward, refresh() casts the changed weight into its copy: the
  // products (and a CUDA graph that captured one, which reads the copy without asking) read the
  // new values from it. A backward through a product that read the copy before fails.
  auto xr = x.clone().requires_grad_();
  step(w, w.detach().to(torch::kBFloat16));
  const auto read_before = linear_in(torch::kBFloat16, xr, w, b);
  {
    torch::NoGradGuard no_grad;
    w.mul_(0.5);
  }
  copies::refresh();
  CHECK(copies::of(w).data_ptr() == c.data_ptr());
  CHECK(torch::equal(c, w.to(torch::kBFloat16)));
  CHECK(copies::served() == now + 2);
  CHECK_THROWS_WITH(read_before.sum().backward(), Contains("modified by an inplace operation"));
  // A copy that holds its weight is left as the step wrote it (zeros, told from a cast by
  // the products giving the bias).
  step(w, torch::zeros({8, 16}, torch::kBFloat16));
  copies::refresh();
  CHECK(torch::equal(linear_in(torch::kBFloat16, x, w, b), b.to(torch::kBFloat16).expand({4, 8})));
  step(w, w.detach().to(torch::kBFloat16));
  CHECK(copies::of(w).data_ptr() == c.data_ptr());
  // Given other storage (zero3 gathers, set_data): a cast.
  w.set_data(torch::randn({8, 16}, gen));
  CHECK(copies::of(w).data_ptr() != c.data_ptr());
  CHECK(torch::equal(copies::of(w), w.to(torch::kBFloat16)));
  // WICK_CUDA_DISABLE=bf16_copies: the products cast.
  step(w, torch::zeros({8, 16}, torch::kBFloat16));
  wick::cuda::set_hidden_own_kernels(1u
                                     << static_cast<unsigned>(wick::cuda::OwnKernel::bf16_copies));
  CHECK(rel(linear_in(torch::kBFloat16, x, w, b), at::linear(x, w, b).to(torch::kDouble)) < 2e-2);
  wick::cuda::set_hidden_own_kernels(0);
  CHECK(torch::equal(linear_in(torch::kBFloat16, x, w, b), b.to(torch::kBFloat16).expand({4, 8})));
  // At a fit's end the copies are freed: a cast, and none asked for.
  copies::release({w});
  CHECK_FALSE(copies::to_write(w).defined());
  CHECK(torch::equal(copies::of(w), w.to(torch::kBFloat16)));
  // No copy of what is not a contiguous float leaf: a bf16 tensor is itself; a leaf that is not
  // contiguous is cast, and no later step is asked for its copy.
  const auto h = torch::randn({8, 16}, gen).to(torch::kBFloat16);
  CHECK(copies::of(h).data_ptr() == h.data_ptr());
  const auto strided = torch::randn({16, 8}, gen).t().requires_grad_();
  REQUIRE(strided.is_leaf());
  CHECK(torch::equal(copies::of(strided), strided.to(torch::kBFloat16)));
  CHECK_FALSE(copies::to_write(strided).defined());
}

namespace {

// Attention in double from its formula: softmax(q k^T / sqrt(E), keys past the query masked
// when causal) v.
at::Tensor attention_ref(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         bool causal) {
  auto s = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (causal)
    s = s.masked_fill(torch::ones({q.size(-2), k.size(-2)}, torch::kBool).triu(1), -INFINITY);
  return at::matmul(s.softmax(-1), v);
}

}  // namespace

// [cpu-path]: float32 [batch, heads, L, 16] with L up to 256 runs wick's kernel, compiled per
// instruction set ([cpu-kernels] runs it without AVX2 too).
TEST_CASE("wick::scaled_dot_product_attention matches the formula and its gradient",
          "[algorithms][attention][cpu-kernels][cpu-path]") {
  torch::manual_seed(11);
  struct Shape {
    std::int64_t batch, heads, tokens, width;
  };
  // One token; partial 16-key chunks; the longest the kernel takes; shapes it leaves to
  // LibTorch (E = 32, E = 8, L = 257).
  const std::vector<Shape> shapes = {{2, 3, 1, 16},   {2, 2, 17, 16}, {1, 2, 40, 16},
                                     {1, 1, 256, 16}, {1, 2, 20, 32}, {1, 2, 9, 8},
                                     {1, 1, 257, 16}};
  for (const auto& sh : shapes)
    for (const bool causal : {true, false}) {
      INFO("[" << sh.batch << ", " << sh.heads << ", " << sh.tokens << ", " << sh.width
               << "], causal " << causal);
      // q, k, v as heads split off one packed projection [B, L, 3 heads E], as a model has them.
      const auto packed = torch::randn({sh.batch, sh.tokens, 3 * sh.heads * sh.width});
      auto x = packed.clone().requires_grad_(true);
      auto xd = packed.to(torch::kDouble).requires_grad_(true);
      auto heads_of = [&](const at::Tensor& t) {
        auto parts = t.split(sh.heads * sh.width, 2);
        for (auto& part : parts)
          part = part.view({sh.batch, sh.tokens, sh.heads, sh.width}).transpose(1, 2);
        return parts;
      };
      const auto h = heads_of(x), hd = heads_of(xd);
      const auto y = wick::scaled_dot_product_attention(h[0], h[1], h[2], 0.0, causal);
      const auto want = attention_ref(hd[0], hd[1], hd[2], causal);
      CHECK((y.to(torch::kDouble) - want).abs().max().item<double>() < 2e-6);
      // The output's gradient not contiguous: [B, L, heads, E] transposed back.
      const auto dy = torch::randn({sh.batch, sh.tokens, sh.heads, sh.width}).transpose(1, 2);
      y.backward(dy);
      want.backward(dy.to(torch::kDouble));
      CHECK((x.grad().to(torch::kDouble) - xd.grad()).abs().max().item<double>() < 1e-5);
      // Without autograd: the same values.
      {
        torch::NoGradGuard no_grad;
        CHECK(torch::equal(wick::scaled_dot_product_attention(h[0], h[1], h[2], 0.0, causal), y));
      }
      // bf16 heads (a bf16-autocast model's), for the shapes the kernel takes: computed in float
      // from the exact bf16 inputs, the output and the gradients rounded to nearest once.
      if (sh.width != 16 || sh.tokens > 256) continue;
      auto xb = packed.to(torch::kBFloat16).requires_grad_(true);
      auto xbd = xb.detach().to(torch::kDouble).requires_grad_(true);
      const auto hb = heads_of(xb), hbd = heads_of(xbd);
      const auto yb = wick::scaled_dot_product_attention(hb[0], hb[1], hb[2], 0.0, causal);
      const auto want_b = attention_ref(hbd[0], hbd[1], hbd[2], causal);
      CHECK(yb.scalar_type() == torch::kBFloat16);
      CHECK(bf16_error(yb, want_b) <= 1);
      const auto dyb = dy.to(torch::kBFloat16);
      yb.backward(dyb);
      want_b.backward(dyb.to(torch::kDouble));
      CHECK(bf16_error(xb.grad(), xbd.grad()) <= 1);
    }
  // The kernel's output is [B, L, heads, E] in memory: transposed back it is contiguous.
  const auto q = torch::randn({2, 4, 8, 16});
  CHECK(wick::scaled_dot_product_attention(q, q, q, 0.0, true).transpose(1, 2).is_contiguous());
  // Dropout and other types take LibTorch's attention (double here: LibTorch 1.13 has no bf16
  // matrix product on a CPU without AVX-512, which the [cpu-path] runs act as).
  const auto qd = q.to(torch::kDouble);
  const auto got = wick::scaled_dot_product_attention(qd, qd, qd, 0.0, true);
  CHECK(got.scalar_type() == torch::kDouble);
  CHECK((got - attention_ref(qd, qd, qd, true)).abs().max().item<double>() < 1e-12);
  CHECK(wick::scaled_dot_product_attention(q, q, q, 0.5, true).sizes() == q.sizes());
}

// ---- wick::layer_norm, wick::add_layer_norm ----------------------------------------------

namespace {

// The largest difference relative to the largest reference value.
double rel_diff(const at::Tensor& got, const at::Tensor& want) {
  return max_diff(got, want) / want.abs().max().item<double>();
}

}  // namespace

// [cpu-path]: float32 and bf16 rows run wick's kernel, compiled per instruction set.
TEST_CASE("wick::layer_norm of rows of one value repeated is the bias, as LibTorch's",
          "[algorithms][normalization][cpu-kernels][cpu-path]") {
  // The mean of a sum and a rounded 1 / width missed the value by its rounding: a variance of
  // that, and with a small eps outputs of +-1 (0.02 at eps 1e-5) where the bias belongs.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  for (const std::int64_t width : {63, 255, 1000, 1025})
    for (const float value : {1000.f, 3.f, -0.1f})
      for (const double eps : {1e-12, 1e-5}) {
        INFO("width " << width << ", value " << value << ", eps " << eps);
        const auto x = torch::full({4, width}, value);
        const auto w = torch::randn({width}, gen), b = torch::randn({width}, gen);
        CHECK(torch::equal(wick::layer_norm(x, w, b, eps), b.expand({4, width})));
        const auto [s, y] = wick::add_layer_norm(x * 0.6f, x * 0.4f, w, b, eps);
        CHECK((y - b).abs().max().item<float>() < 1e-6f);  // s: 0.6 v + 0.4 v, within a rounding
      }
}

TEST_CASE("wick::add_layer_norm with only the sum used and an infinite rstd: no NaN",
          "[algorithms][normalization][cpu-kernels][cpu-path]") {
  // Width 1 and eps 0: rstd is infinite, where a pass with a zero dy made 0 * inf a NaN.
  auto r = torch::randn({5, 1}).requires_grad_(true), br = torch::randn({5, 1});
  const auto up = torch::randn({5, 1});
  (wick::add_layer_norm(r, br, torch::ones({1}), torch::zeros({1}), 0.0).first * up)
      .sum()
      .backward();
  CHECK(torch::equal(r.grad(), up));
}

TEST_CASE("wick::layer_norm and add_layer_norm: the layer norm and its gradients, in one pass",
          "[algorithms][normalization][cpu-kernels][cpu-path]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  // A width with a remainder past 16 lanes and GPT-2's; 130 rows: more than one task's 64.
  for (const std::int64_t width : {100, 768})
    for (const auto type : {torch::kFloat, torch::kBFloat16}) {
      INFO(type << ", width " << width);
      const auto x = (3 * torch::randn({2, 65, width}, gen) + 1).to(type);
      const auto w = torch::randn({width}, gen), b = torch::randn({width}, gen);
      const auto dy = torch::randn({2, 65, width}, gen).to(type);
      auto xg = x.clone().requires_grad_(true), wg = w.clone().requires_grad_(true),
           bg = b.clone().requires_grad_(true);
      const auto y = wick::layer_norm(xg, wg, bg);
      y.backward(dy);
      auto xd = x.to(torch::kDouble).requires_grad_(true),
           wd = w.to(torch::kDouble).requires_grad_(true),
           bd = b.to(torch::kDouble).requires_grad_(true);
      const auto yd = at::layer_norm(xd, {width}, wd, bd, 1e-5);
      yd.backward(dy.to(torch::kDouble));
      CHECK(y.scalar_type() == type);
      CHECK(xg.grad().scalar_type() == type);
      if (type == torch::kFloat) {
        CHECK(rel_diff(y, yd) < 2e-6);
        CHECK(rel_diff(xg.grad(), xd.grad()) < 2e-6);
      } else {  // computed in float from the exact bf16 values, rounded once
        CHECK(bf16_error(y, yd) <= 1);
        CHECK(bf16_error(xg.grad(), xd.grad()) <= 1);
      }
      CHECK(rel_diff(wg.grad(), wd.grad()) < 2e-6);
      CHECK(rel_diff(bg.grad(), bd.grad()) < 2e-6);
    }

  // The residual step: a float32 stream and a float32 or bf16 branch (bf16 autocast's).
  const std::int64_t width = 768;
  const auto w = torch::randn({width}, gen), b = torch::randn({width}, gen);
  const auto r = 2 * torch::randn({130, width}, gen);
  const auto cs = torch::randn({130, width}, gen), cy = torch::randn({130, width}, gen);
  for (const auto btype : {torch::kFloat, torch::kBFloat16}) {
    INFO("branch " << btype);
    const auto br = torch::randn({130, width}, gen).to(btype);
    auto rg = r.clone().requires_grad_(true), brg = br.clone().requires_grad_(true),
         wg = w.clone().requires_grad_(true), bg = b.clone().requires_grad_(true);
    const auto [s, y] = wick::add_layer_norm(rg, brg, wg, bg);
    CHECK(torch::equal(s, r + br));  // the sum as `residual + branch` gives it
    CHECK(y.scalar_type() == torch::kFloat);
    ((s * cs).sum() + (y * cy).sum()).backward();
    auto rd = r.to(torch::kDouble).requires_grad_(true),
         brd = br.to(torch::kDouble).requires_grad_(true),
         wd = w.to(torch::kDouble).requires_grad_(true),
         bd = b.to(torch::kDouble).requires_grad_(true);
    const auto sd = rd + brd;
    const auto yd = at::layer_norm(sd, {width}, wd, bd, 1e-5);
    ((sd * cs).sum() + (yd * cy).sum()).backward();
    CHECK(rel_diff(y, yd) < 2e-6);
    CHECK(rel_diff(rg.grad(), rd.grad()) < 2e-6);
    REQUIRE(brg.grad().scalar_type() == btype);
    if (btype == torch::kFloat)
      CHECK(rel_diff(brg.grad(), brd.grad()) < 2e-6);
    else
      CHECK(bf16_error(brg.grad(), brd.grad()) <= 1);
    CHECK(rel_diff(wg.grad(), wd.grad()) < 2e-6);
    CHECK(rel_diff(bg.grad(), bd.grad()) < 2e-6);
    // The last block's sum goes nowhere but its normalisation: the same gradients as a zero
    // gradient of s. And a sum whose normalisation goes nowhere passes its gradient through.
    auto r2 = r.clone().requires_grad_(true), w2 = w.clone().requires_grad_(true);
    const auto only_y = wick::add_layer_norm(r2, br, w2, b);
    (only_y.second * cy).sum().backward();
    auto r3 = r.clone().requires_grad_(true), w3 = w.clone().requires_grad_(true);
    const auto both = wick::add_layer_norm(r3, br, w3, b);
    ((both.first * 0).sum() + (both.second * cy).sum()).backward();
    CHECK(torch::equal(r2.grad(), r3.grad()));
    CHECK(torch::equal(w2.grad(), w3.grad()));
    auto r4 = r.clone().requires_grad_(true), w4 = w.clone().requires_grad_(true);
    (wick::add_layer_norm(r4, br, w4, b).first * cs).sum().backward();
    CHECK(torch::equal(r4.grad(), cs));
    CHECK_FALSE(w4.grad().defined());  // none, as `r + br` then at::layer_norm leaves it
  }

  // The gain's gradient is summed per 64 rows, then over those in order: the same bits on any
  // number of threads.
  {
    const auto gain_grad = [&](int threads) {
      const int was = at::get_num_threads();
      at::set_num_threads(threads);
      auto wt = w.clone().requires_grad_(true);
      (wick::add_layer_norm(r, cs, wt, b).second * cy).sum().backward();
      at::set_num_threads(was);
      return wt.grad();
    };
    CHECK(torch::equal(gain_grad(1), gain_grad(3)));
  }

  // Under bf16 autocast the normalised rows come in bf16, as the matrix product that follows
  // would cast them: rounded once from float.
  {
    const wick::AutocastScope autocast(c10::DeviceType::CPU, at::kBFloat16);
    const auto br = torch::randn({130, width}, gen).to(torch::kBFloat16);
    const auto [s, y] = wick::add_layer_norm(r, br, w, b);
    CHECK(s.scalar_type() == torch::kFloat);
    REQUIRE(y.scalar_type() == torch::kBFloat16);
    const auto sd = r.to(torch::kDouble) + br.to(torch::kDouble);
    CHECK(bf16_error(y, at::layer_norm(sd, {width}, w.to(torch::kDouble), b.to(torch::kDouble),
                                       1e-5)) <= 1);
    CHECK(wick::layer_norm(r, w, b).scalar_type() == torch::kBFloat16);
  }

  // Not contiguous: the contiguous copy's values. Other types, no weight and bias, or a bf16
  // stream: LibTorch's layer norm (after the sum).
  const auto xt = torch::randn({width, 7}, gen).t();
  CHECK(torch::equal(wick::layer_norm(xt, w, b), wick::layer_norm(xt.contiguous(), w, b)));
  const auto xd = torch::randn({5, 8}, gen, torch::kDouble),
             wd = torch::randn({8}, gen, torch::kDouble);
  CHECK(torch::equal(wick::layer_norm(xd, wd, wd), at::layer_norm(xd, {8}, wd, wd, 1e-5)));
  const auto xf = xd.to(torch::kFloat);
  CHECK(torch::equal(wick::layer_norm(xf, {}, {}), at::layer_norm(xf, {8}, {}, {}, 1e-5)));
  const auto rb = r.to(torch::kBFloat16), bb = cs.to(torch::kBFloat16);
  const auto [sb, yb] = wick::add_layer_norm(rb, bb, w, b);
  CHECK(torch::equal(sb, rb + bb));
  CHECK(torch::equal(yb, wick::layer_norm(rb + bb, w, b)));
  CHECK_THROWS_WITH(wick::add_layer_norm(r, cs.t(), w, b),
                    Catch::Matchers::Contains("wick::add_layer_norm: residual and branch of one "
                                              "shape on one device, got [130, 768]"));
  CHECK_THROWS_WITH(wick::layer_norm(torch::tensor(1.f), w, b),
                    Catch::Matchers::Contains("wick::layer_norm: a tensor [..., width]") &&
                        Catch::Matchers::Contains("got a 0-dimensional tensor"));
}

// ---- label_smoothing ----------------------------------------------------------------------

TEST_CASE("label_smoothing: training loss (1 - eps) CE + eps mean(-log p), validation plain CE",
          "[algorithms][label_smoothing]") {
  auto task = std::make_shared<ImageTask>(8, 4, ImageTask::Net::linear, 4);
  auto tp =
      make(task, options(4), sgd(0.1), "[[hooks]]\nplugin = \"label_smoothing\"\nepsilon = 0.2\n");
  auto& t = *tp;
  Seen seen;
  watch(t, *task, seen);
  std::vector<double> valid_losses;
  auto probe = std::make_shared<Probe>();
  probe->points[Point::after_loss] = [&](Context& c) {
    if (c.state().validating()) valid_losses.push_back(c.output().loss.item<double>());
  };
  t.add_hook(entry(probe, "valid_probe", 60));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  REQUIRE(seen.preds.size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto y = task->y_.slice(0, 4 * k, 4 * k + 4);
    const double want = 0.8 * ce(seen.preds[k], y) + 0.2 * uniform_term(seen.preds[k]);
    CHECK(std::abs(seen.losses[k] - want) < 1e-5);
    // And LibTorch's own label-smoothed cross-entropy agrees.
    const double torch_ls =
        torch::nn::functional::cross_entropy(
            seen.preds[k], y, torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(0.2))
            .item<double>();
    CHECK(std::abs(seen.losses[k] - torch_ls) < 1e-5);
  }
  REQUIRE(valid_losses.size() == 1);
  const auto vpred = task->net_->forward(task->vx_);
  CHECK(
      std::abs(valid_losses[0] -
               ce(vpred, std::dynamic_pointer_cast<TensorDataset>(task->valid_data())->target())) <
      1e-5);
}

TEST_CASE("label_smoothing refuses predictions that are not class scores [N, C]",
          "[algorithms][label_smoothing]") {
  auto task = std::make_shared<ImageTask>(4, 2, ImageTask::Net::linear);
  auto t = make(task, options(4), sgd(0.1), "[[hooks]]\nplugin = \"label_smoothing\"\n");
  auto probe = std::make_shared<Probe>();
  // After the task's loss, before label_smoothing (order -3): a prediction of one score each,
  // as a vector [N] and as a column [N, 1] (a binary classifier's, whose loss would only be
  // scaled: the uniform term over one class is 0).
  for (const bool column : {false, true}) {
    DYNAMIC_SECTION((column ? "[N, 1]" : "[N]")) {
      probe->points[Point::after_loss] = [column](Context& c) {
        c.output().pred = c.output().pred.sum(1, column);
      };
      t->add_hook(entry(probe, "flatten_pred", -50));
      auto r = t->fit();
      CHECK(r.status == FitResult::Status::failed);
      CHECK_THAT(r.error, Contains("label_smoothing") && Contains("class scores [N, C], C >= 2") &&
                              Contains(column ? "a tensor of [4, 1]; for one score a sample (BCE)"
                                              : "a tensor of [4]"));
    }
  }
}

// ---- mixup and cutmix ---------------------------------------------------------------------

TEST_CASE("mixup: inputs lam x + (1 - lam) x[perm], loss lam CE(y) + (1 - lam) CE(y[perm])",
          "[algorithms][mixup]") {
  auto run = [](const std::string& extra, Seen& seen, std::shared_ptr<ImageTask>& task) {
    task = std::make_shared<ImageTask>(8, 2, ImageTask::Net::linear, 4);
    auto o = options(4);
    o.seed = 3;
    auto tp = make(task, o, sgd(0.1), "[[hooks]]\nplugin = \"mixup\"\nalpha = 0.4\n" + extra);
    auto& t = *tp;
    watch(t, *task, seen);
    REQUIRE(t.fit().status == FitResult::Status::completed);
  };
  Seen seen;
  std::shared_ptr<ImageTask> task;
  run("", seen, task);
  REQUIRE(seen.inputs.size() == 2);
  std::vector<double> lams;
  for (std::size_t k = 0; k < 2; ++k) {
    const auto x = task->x_.slice(0, 4 * k, 4 * k + 4);
    const auto y = task->y_.slice(0, 4 * k, 4 * k + 4);
    const auto m = recover_mixup(seen.inputs[k], x);
    INFO("step " << k << " lam " << m.lam);
    CHECK((m.lam > 0 && m.lam < 1));
    const double want =
        m.lam * ce(seen.preds[k], y) + (1 - m.lam) * ce(seen.preds[k], take(y, m.perm));
    CHECK(std::abs(seen.losses[k] - want) < 1e-5);
    lams.push_back(m.lam);
  }
  CHECK(lams[0] != lams[1]);  // a draw per batch
  // Validation sees the data as it is.
  REQUIRE(seen.valid_inputs.size() == 1);
  CHECK(seen.valid_inputs[0].equal(task->vx_));

  // The same seed draws the same mixes (what exact resume rests on).
  Seen again;
  std::shared_ptr<ImageTask> task2;
  run("", again, task2);
  for (std::size_t k = 0; k < 2; ++k) CHECK(again.inputs[k].equal(seen.inputs[k]));

  // With label smoothing after it: (1 - eps) * the mixed loss + eps * the uniform term.
  Seen both;
  std::shared_ptr<ImageTask> task3;
  run("[[hooks]]\nplugin = \"label_smoothing\"\nepsilon = 0.1\n", both, task3);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto x = task3->x_.slice(0, 4 * k, 4 * k + 4);
    const auto y = task3->y_.slice(0, 4 * k, 4 * k + 4);
    const auto m = recover_mixup(both.inputs[k], x);
    const auto& z = both.preds[k];
    const double mixed = m.lam * ce(z, y) + (1 - m.lam) * ce(z, take(y, m.perm));
    CHECK(std::abs(both.losses[k] - (0.9 * mixed + 0.1 * uniform_term(z))) < 1e-5);
  }
}

TEST_CASE("cutmix: a box from x[perm], loss weighted by the pixels kept", "[algorithms][cutmix]") {
  auto task = std::make_shared<ImageTask>(12, 8, ImageTask::Net::linear, 4);
  auto o = options(4);
  o.seed = 1;
  auto tp = make(task, o, sgd(0.1), "[[hooks]]\nplugin = \"cutmix\"\n");
  auto& t = *tp;
  Seen seen;
  watch(t, *task, seen);
  REQUIRE(t.fit().status == FitResult::Status::completed);
  REQUIRE(seen.inputs.size() == 3);
  int boxes = 0;
  for (std::size_t k = 0; k < 3; ++k) {
    INFO("step " << k);
    const auto x = task->x_.slice(0, 4 * k, 4 * k + 4);
    const auto y = task->y_.slice(0, 4 * k, 4 * k + 4);
    const auto& m = seen.inputs[k];
    // The pixels that changed in any image span the box.
    const auto changed = (m != x).any(0).any(0);  // [H, W]
    double want = ce(seen.preds[k], y);
    if (changed.any().item<bool>()) {
      const auto rows = changed.any(1).nonzero(), cols = changed.any(0).nonzero();
      const auto y1 = rows.min().item<std::int64_t>(), y2 = rows.max().item<std::int64_t>() + 1;
      const auto x1 = cols.min().item<std::int64_t>(), x2 = cols.max().item<std::int64_t>() + 1;
      using torch::indexing::Slice;
      const std::vector<torch::indexing::TensorIndex> box{Slice(), Slice(), Slice(y1, y2),
                                                          Slice(x1, x2)};
      // Outside the box nothing changed.
      auto outside = m.clone();
      outside.index_put_(box, x.index(box));
      CHECK(outside.equal(x));
      bool found = false;
      for (const auto& perm : permutations(4))
        if (m.index(box).equal(take(x, perm).index(box))) {
          const double lam = 1 - static_cast<double>((y2 - y1) * (x2 - x1)) / 64.0;
          want = lam * ce(seen.preds[k], y) + (1 - lam) * ce(seen.preds[k], take(y, perm));
          found = true;
          break;
        }
      CHECK(found);
      ++boxes;
    }
    CHECK(std::abs(seen.losses[k] - want) < 1e-5);
  }
  CHECK(boxes >= 2);
  CHECK(seen.valid_inputs.at(0).equal(task->vx_));
}

TEST_CASE("cutmix refuses inputs that are not images", "[algorithms][cutmix]") {
  auto task = std::make_shared<ImageTask>(4, 4, ImageTask::Net::linear, 0, /*flat=*/true);
  CHECK_THAT(fit_error(task, options(4), "[[hooks]]\nplugin = \"cutmix\"\n"),
             Contains("cutmix needs image batches [N, C, H, W]") && Contains("[4, 16]") &&
                 Contains("mixup"));
}

// ---- sam ----------------------------------------------------------------------------------

TEST_CASE("sam: the step uses the gradient at w + rho g / |g|, by hand", "[algorithms][sam]") {
  for (const bool clip : {false, true}) {
    INFO((clip ? "with grad_clip" : "alone"));
    auto task = std::make_shared<ImageTask>(8, 3, ImageTask::Net::linear);
    auto tp =
        make(task, options(8), sgd(0.5),
             "[[hooks]]\nplugin = \"sam\"\nrho = 0.3\n" +
                 std::string(clip ? "[[hooks]]\nplugin = \"grad_clip\"\nmax_norm = 0.05\n" : ""));
    auto& t = *tp;
    at::Tensor w0, b0;
    double logged = 0;
    auto probe = std::make_shared<Probe>();
    probe->points[Point::before_step] = [&](Context& c) {
      auto ps = c.model().parameters();
      w0 = ps[0].detach().clone();
      b0 = ps[1].detach().clone();
    };
    probe->points[Point::after_step] = [&](Context& c) { logged = c.output().loss.item<double>(); };
    t.add_hook(entry(probe, "probe", 50));
    REQUIRE(t.fit().status == FitResult::Status::completed);

    const auto& x = task->x_;
    const auto& y = task->y_;
    auto [gw, gb] = ce_grad(w0, b0, x, y);
    const double norm = std::sqrt((gw * gw).sum().item<double>() + (gb * gb).sum().item<double>());
    const double s = 0.3 / norm;
    auto [hw, hb] = ce_grad(w0 + s * gw, b0 + s * gb, x, y);
    if (clip) {
      const double n2 = std::sqrt((hw * hw).sum().item<double>() + (hb * hb).sum().item<double>());
      const double coef = std::min(1.0, 0.05 / (n2 + 1e-6));
      hw = hw * coef;
      hb = hb * coef;
    }
    auto ps = t.model().parameters();
    CHECK(max_diff(ps[0], w0 - 0.5 * hw) < 1e-5);
    CHECK(max_diff(ps[1], b0 - 0.5 * hb) < 1e-5);
    // A plain step would have landed elsewhere.
    CHECK(max_diff(ps[0], w0 - 0.5 * gw) > 1e-4);
    // The logged loss is the first pass's, at w.
    auto xf = x.reshape({8, -1});
    CHECK(std::abs(logged - ce(xf.matmul(w0.t()) + b0, y)) < 1e-5);
  }
}

TEST_CASE("sam refuses grad_accum with the reason and the fix", "[algorithms][sam]") {
  auto task = std::make_shared<ImageTask>(8, 2, ImageTask::Net::linear);
  CHECK_THAT(
      fit_error(task, options(4),
                "[[hooks]]\nplugin = \"sam\"\n[[hooks]]\nplugin = \"grad_accum\"\nsteps = 2\n"),
      Contains("grad_accum (steps = 2)") && Contains("trainer.batch_size"));
}

// ---- swa ----------------------------------------------------------------------------------

TEST_CASE("swa: the model ends as the mean of the epochs' weights, batch norm recomputed",
          "[algorithms][swa]") {
  auto task = std::make_shared<ImageTask>(16, 2, ImageTask::Net::bn, 4);
  auto tp = make(task, options(4, 3), sgd(0.2), "[[hooks]]\nplugin = \"swa\"\nstart_epoch = 1\n");
  auto& t = *tp;
  std::vector<std::vector<at::Tensor>> trained;  // each epoch's weights, before swa acts
  auto probe = std::make_shared<Probe>();
  probe->points[Point::before_valid] = [&](Context& c) {
    std::vector<at::Tensor> ps;
    for (const auto& p : c.model().parameters()) ps.push_back(p.detach().clone());
    trained.push_back(ps);
  };
  t.add_hook(entry(probe, "probe", -200));
  auto r = t.fit();
  REQUIRE(r.status == FitResult::Status::completed);
  REQUIRE(trained.size() == 3);
  auto ps = t.model().parameters();
  for (std::size_t i = 0; i < ps.size(); ++i)
    CHECK(max_diff(ps[i], (trained[1][i] + trained[2][i]) / 2) < 1e-6);

  // Batch norm: the mean over the 4 training batches of each batch's mean and unbiased
  // variance of the first layer's output, at the averaged weights.
  auto bn = task->net_[2]->as<torch::nn::BatchNorm1dImpl>();
  REQUIRE(bn);
  auto lin = task->net_[1]->as<torch::nn::LinearImpl>();
  at::Tensor mean = torch::zeros({4}, torch::kDouble), var = torch::zeros({4}, torch::kDouble);
  for (int b = 0; b < 4; ++b) {
    auto h = task->x_.slice(0, 4 * b, 4 * b + 4)
                 .reshape({4, -1})
                 .to(torch::kDouble)
                 .matmul(lin->weight.to(torch::kDouble).t()) +
             lin->bias.to(torch::kDouble);
    mean += h.mean(0) / 4;
    var += h.var(0, /*unbiased=*/true) / 4;
  }
  CHECK(max_diff(bn->running_mean, mean) < 1e-5);
  CHECK(max_diff(bn->running_var, var) < 1e-5);
}

namespace {

std::string swa_hooks(std::int64_t start_epoch) {
  return "[[hooks]]\nplugin = \"swa\"\nstart_epoch = " + std::to_string(start_epoch) + "\n";
}
std::shared_ptr<ImageTask> swa_task() {
  return std::make_shared<ImageTask>(16, 2, ImageTask::Net::bn, 4);  // 4 steps an epoch
}

// swa on 3 epochs: a fit stopped by max_steps = `stop`, then one resumed from the checkpoint
// it ended with, under max_steps = `resumed_max_steps`. Returns both.
std::pair<std::unique_ptr<Trainer>, std::unique_ptr<Trainer>> swa_resumed(
    std::int64_t start_epoch, std::int64_t stop, std::int64_t resumed_max_steps) {
  auto o = options(4, 3);
  o.max_steps = stop;
  auto first = make(swa_task(), o, sgd(0.2), swa_hooks(start_epoch));
  TempDir tmp;
  const auto ckpt = (tmp / "ckpt").string();
  auto saver = std::make_shared<Probe>();
  saver->points[Point::after_fit] = [&](Context& c) { c.save_checkpoint(ckpt, "end"); };
  first->add_hook(entry(saver, "saver", 100));
  REQUIRE(first->fit().status == FitResult::Status::completed);
  REQUIRE(first->state().optimizer_step == stop);
  o.max_steps = resumed_max_steps;
  auto second = make(swa_task(), o, sgd(0.2), swa_hooks(start_epoch));
  auto restorer = std::make_shared<Probe>();
  restorer->points[Point::before_fit] = [&](Context& c) { c.restore_checkpoint(ckpt); };
  second->add_hook(entry(restorer, "restorer", -200));
  REQUIRE(second->fit().status == FitResult::Status::completed);
  return {std::move(first), std::move(second)};
}

}  // namespace

TEST_CASE("swa: a fit max_steps stopped mid-epoch, resumed without it, ends as one never stopped",
          "[algorithms][swa]") {
  auto full = make(swa_task(), options(4, 3), sgd(0.2), swa_hooks(1));
  REQUIRE(full->fit().status == FitResult::Status::completed);
  // Stopped at step 6 (batch 2 of epoch 1's 4): the model ends on the average, and so does the
  // checkpoint the fit ends with. Resumed without the limit, it trains on from the weights as
  // trained, and averages epoch 1's end, not its batch 2.
  const auto [first, second] = swa_resumed(1, 6, 0);
  CHECK(second->state().optimizer_step == 12);
  const auto a = full->model().parameters(), b = second->model().parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(max_diff(a[i], b[i]) < 1e-6);
  const auto ab = full->model().buffers(), bb = second->model().buffers();
  for (std::size_t i = 0; i < ab.size(); ++i)
    if (ab[i].is_floating_point()) CHECK(max_diff(ab[i], bb[i]) < 1e-5);
}

TEST_CASE(
    "swa: a fit max_steps stopped at an epoch's end, resumed with the same limit, ends "
    "as it did",
    "[algorithms][swa]") {
  // Step 8 ends epoch 1: the average of epochs 0 and 1 is applied, and a resume that trains
  // nothing more keeps it (it must not count epoch 1's weights again).
  const auto [first, second] = swa_resumed(0, 8, 8);
  CHECK(second->state().optimizer_step == 8);
  const auto a = first->model().parameters(), b = second->model().parameters();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(max_diff(a[i], b[i]) == 0);
}

TEST_CASE("swa: a failed batch-norm pass keeps the trained statistics and names the way out",
          "[algorithms][swa]") {
  auto task = swa_task();
  // Only swa's pass runs the model in training mode without gradients.
  task->on_forward = [&task](Context&, const at::Tensor&, const at::Tensor&) {
    if (!torch::GradMode::is_enabled() && task->net_->is_training())
      throw std::runtime_error("no second pass here");
  };
  auto t = make(task, options(4, 3), sgd(0.2), swa_hooks(1));
  at::Tensor mean, var;  // the last epoch's trained statistics, before swa acts
  auto probe = std::make_shared<Probe>();
  probe->points[Point::before_valid] = [&](Context&) {
    auto bn = task->net_[2]->as<torch::nn::BatchNorm1dImpl>();
    mean = bn->running_mean.clone();
    var = bn->running_var.clone();
  };
  t->add_hook(entry(probe, "probe", -200));
  const auto r = t->fit();
  CHECK(r.status == FitResult::Status::failed);
  CHECK_THAT(r.error, Contains("swa: recomputing batch-norm statistics over the training data "
                               "failed: no second pass here") &&
                          Contains("bn_update = false"));
  auto bn = task->net_[2]->as<torch::nn::BatchNorm1dImpl>();
  REQUIRE(mean.defined());
  CHECK(torch::equal(bn->running_mean, mean));
  CHECK(torch::equal(bn->running_var, var));
  REQUIRE(bn->options.momentum().has_value());
  CHECK(*bn->options.momentum() == 0.1);
}

TEST_CASE("swa refuses a start_epoch the run never reaches", "[algorithms][swa]") {
  auto task = std::make_shared<ImageTask>(8, 2, ImageTask::Net::linear);
  CHECK_THAT(fit_error(task, options(4, 2), "[[hooks]]\nplugin = \"swa\"\nstart_epoch = 2\n"),
             Contains("start_epoch = 2") && Contains("2 epochs"));
}

TEST_CASE("label_smoothing, sam and swa keep a float64 model's numbers in float64",
          "[algorithms][label_smoothing][sam][swa]") {
  // Each is checked at 1e-12, a millionth of what float32 arithmetic anywhere in it would miss by.
  const auto f64 = [](std::int64_t n, ImageTask::Net net) {
    return std::make_shared<ImageTask>(n, 3, net, 4, false, torch::kDouble);
  };
  SECTION("label_smoothing's uniform term") {
    auto task = f64(8, ImageTask::Net::linear);
    auto t = make(task, options(4), sgd(0.1),
                  "[[hooks]]\nplugin = \"label_smoothing\"\nepsilon = 0.2\n");
    Seen seen;
    watch(*t, *task, seen);
    REQUIRE(t->fit().status == FitResult::Status::completed);
    REQUIRE(seen.preds.size() == 2);
    for (std::size_t k = 0; k < 2; ++k) {
      REQUIRE(seen.preds[k].scalar_type() == torch::kDouble);
      const auto y = task->y_.slice(0, 4 * k, 4 * k + 4);
      CHECK(std::abs(seen.losses[k] -
                     (0.8 * ce(seen.preds[k], y) + 0.2 * uniform_term(seen.preds[k]))) < 1e-12);
    }
  }
  SECTION("sam's gradient norm") {
    auto task = f64(8, ImageTask::Net::linear);
    auto t = make(task, options(8), sgd(0.5), "[[hooks]]\nplugin = \"sam\"\nrho = 0.3\n");
    at::Tensor w0, b0;
    auto probe = std::make_shared<Probe>();
    probe->points[Point::before_step] = [&](Context& c) {
      if (!c.state().training()) return;  // a validation batch
      w0 = c.model().parameters()[0].detach().clone();
      b0 = c.model().parameters()[1].detach().clone();
    };
    t->add_hook(entry(probe, "probe", 50));
    REQUIRE(t->fit().status == FitResult::Status::completed);
    auto [gw, gb] = ce_grad(w0, b0, task->x_, task->y_);
    const double s =
        0.3 / std::sqrt((gw * gw).sum().item<double>() + (gb * gb).sum().item<double>());
    auto [hw, hb] = ce_grad(w0 + s * gw, b0 + s * gb, task->x_, task->y_);
    auto ps = t->model().parameters();
    REQUIRE(ps[0].scalar_type() == torch::kDouble);
    CHECK(max_diff(ps[0], w0 - 0.5 * hw) < 1e-12);
    CHECK(max_diff(ps[1], b0 - 0.5 * hb) < 1e-12);
  }
  SECTION("swa's average") {
    auto task = f64(16, ImageTask::Net::linear);
    auto t = make(task, options(4, 3), sgd(0.2), swa_hooks(1));
    std::vector<std::vector<at::Tensor>> trained;
    auto probe = std::make_shared<Probe>();
    probe->points[Point::before_valid] = [&](Context& c) {
      std::vector<at::Tensor> ps;
      for (const auto& p : c.model().parameters()) ps.push_back(p.detach().clone());
      trained.push_back(ps);
    };
    t->add_hook(entry(probe, "probe", -200));
    REQUIRE(t->fit().status == FitResult::Status::completed);
    REQUIRE(trained.size() == 3);
    auto ps = t->model().parameters();
    for (std::size_t i = 0; i < ps.size(); ++i) {
      REQUIRE(ps[i].scalar_type() == torch::kDouble);
      CHECK(max_diff(ps[i], (trained[1][i] + trained[2][i]) / 2) < 1e-12);
    }
  }
}

// ---- freeze -------------------------------------------------------------------------------

TEST_CASE("freeze: matched parameters get no gradient and keep their values until the epoch",
          "[algorithms][freeze]") {
  auto task = std::make_shared<ImageTask>(8, 2, ImageTask::Net::bn);
  OptimizerOptions adam;
  adam.lr = 0.05;
  adam.weight_decay = 0.1;  // would move a parameter with a zero gradient
  auto tp = make(task, options(4, 2), adam,
                 "[[hooks]]\nplugin = \"freeze\"\npatterns = [\"1.*\"]\nuntil_epoch = 1\n");
  auto& t = *tp;
  std::vector<std::vector<at::Tensor>> at_end;
  std::vector<at::Tensor> initial;
  bool frozen_grad_seen = false;
  auto snapshot = [](Context& c) {
    std::vector<at::Tensor> ps;
    for (const auto& p : c.model().parameters()) ps.push_back(p.detach().clone());
    return ps;
  };
  auto probe = std::make_shared<Probe>();
  probe->points[Point::before_fit] = [&](Context& c) { initial = snapshot(c); };
  probe->points[Point::after_backward] = [&](Context& c) {
    if (c.state().epoch == 0)
      for (const auto& item : c.model().named_parameters())
        if (item.key().rfind("1.", 0) == 0) frozen_grad_seen |= item.value().grad().defined();
  };
  probe->points[Point::after_epoch] = [&](Context& c) { at_end.push_back(snapshot(c)); };
  t.add_hook(entry(probe, "probe", 50));
  REQUIRE(t.fit().status == FitResult::Status::completed);
  REQUIRE(at_end.size() == 2);
  CHECK_FALSE(frozen_grad_seen);
  // Parameters 0, 1 are layer 1 (frozen in epoch 0); 2.. are batch norm and layer 3.
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(at_end[0][i].equal(initial[i]));
    CHECK(max_diff(at_end[1][i], at_end[0][i]) > 1e-4);
  }
  for (std::size_t i = 2; i < initial.size(); ++i) CHECK(max_diff(at_end[0][i], initial[i]) > 1e-4);
}

TEST_CASE("freeze names the model's parameters when a pattern matches none, or all",
          "[algorithms][freeze]") {
  auto task = std::make_shared<ImageTask>(4, 2, ImageTask::Net::linear);
  CHECK_THAT(
      fit_error(task, options(4), "[[hooks]]\nplugin = \"freeze\"\npatterns = [\"encoder.*\"]\n"),
      Contains("pattern 'encoder.*' matches no parameter") && Contains("1.weight, 1.bias"));
  // Nor may the patterns leave nothing to train (LibTorch's backward would fail, naming none).
  CHECK_THAT(fit_error(task, options(4), "[[hooks]]\nplugin = \"freeze\"\npatterns = [\"*\"]\n"),
             Contains("hooks.freeze.patterns match every trainable parameter of the model (2), "
                      "so nothing would train; narrow the patterns"));
}

// ---- channels_last and mixed_precision dtype = "auto" -------------------------------------

TEST_CASE("channels_last: 4-D weights and inputs channels-last, same training",
          "[algorithms][channels_last]") {
  auto run = [](bool on, std::vector<at::Tensor>& out) {
    auto task = std::make_shared<ImageTask>(8, 4, ImageTask::Net::conv, 4);
    auto tp =
        make(task, options(4, 2), sgd(0.1), on ? "[[hooks]]\nplugin = \"channels_last\"\n" : "");
    auto& t = *tp;
    int seen = 0, channels_last = 0;
    task->on_forward = [&](Context& c, const at::Tensor& in, const at::Tensor&) {
      ++seen;
      const auto w = c.model().parameters()[0];
      // What convolutions choose their layout by. With one channel, is_contiguous(ChannelsLast)
      // holds for a plain NCHW tensor too, which convolutions still run NCHW.
      if (in.suggest_memory_format() == at::MemoryFormat::ChannelsLast &&
          w.suggest_memory_format() == at::MemoryFormat::ChannelsLast)
        ++channels_last;
    };
    REQUIRE(t.fit().status == FitResult::Status::completed);
    for (const auto& p : t.model().parameters()) out.push_back(p.detach().clone());
    return std::make_pair(seen, channels_last);
  };
  std::vector<at::Tensor> a, b;
  const auto [seen_on, cl_on] = run(true, a);
  const auto [seen_off, cl_off] = run(false, b);
  CHECK(seen_on == 6);  // 2 epochs of 2 training batches and 1 validation batch
  CHECK(cl_on == seen_on);
  CHECK(cl_off == 0);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(max_diff(a[i], b[i]) < 1e-5);
}

TEST_CASE("mixed_precision dtype auto: bf16 exactly where /proc/cpuinfo lists native bf16",
          "[algorithms][amp][cpu-path]") {
  const auto flags = wick::test::cpu_flags();
  const bool native = flags.count("avx512_bf16") || flags.count("amx_bf16");
  CHECK(wick::cpu_features().native_bf16() == native);
  CHECK(wick::native_bf16(Device{}) == native);
  auto task = std::make_shared<ImageTask>(8, 2, ImageTask::Net::linear);
  auto tp = make(task, options(4), sgd(0.1), "[[hooks]]\nplugin = \"mixed_precision\"\n");
  auto& t = *tp;
  std::vector<at::ScalarType> dtypes;
  task->on_forward = [&](Context&, const at::Tensor&, const at::Tensor& pred) {
    dtypes.push_back(pred.scalar_type());
  };
  REQUIRE(t.fit().status == FitResult::Status::completed);
  REQUIRE(dtypes.size() == 2);
  for (auto d : dtypes) CHECK(d == (native ? at::kBFloat16 : at::kFloat));

  // A validation with no fit before it (wick evaluate) chooses the same way.
  auto vtask = std::make_shared<ImageTask>(8, 2, ImageTask::Net::linear, 4);
  auto v = make(vtask, options(4), sgd(0.1), "[[hooks]]\nplugin = \"mixed_precision\"\n");
  dtypes.clear();
  vtask->on_forward = [&](Context&, const at::Tensor&, const at::Tensor& pred) {
    dtypes.push_back(pred.scalar_type());
  };
  v->validate();
  REQUIRE(dtypes.size() == 1);
  CHECK(dtypes[0] == (native ? at::kBFloat16 : at::kFloat));
}

// ---- parameter refusals ---------------------------------------------------------------------

TEST_CASE("the algorithm plugins refuse bad parameters, naming the key and the fix",
          "[algorithms][config]") {
  struct Bad {
    std::string table, key, message;
  };
  const std::vector<Bad> cases = {
      {"plugin = \"label_smoothing\"\nepsilon = 1.0", "epsilon", "must be in [0, 1)"},
      {"plugin = \"mixup\"\nalpha = 0.0", "alpha", "must be > 0"},
      {"plugin = \"cutmix\"\nalpha = -1.0", "alpha", "must be > 0"},
      {"plugin = \"sam\"\nrho = 0.0", "rho", "must be > 0"},
      {"plugin = \"swa\"\nstart_epoch = -2", "start_epoch", "or -1 for the last quarter"},
      {"plugin = \"freeze\"\npatterns = []", "patterns", "at least one pattern"},
      {"plugin = \"freeze\"\npatterns = [\"0.*\"]\nuntil_epoch = -2", "until_epoch",
       "or -1 for the whole run"},
  };
  for (const auto& c : cases) {
    INFO(c.table);
    CHECK_THROWS_WITH(load_hooks("[[hooks]]\n" + c.table + "\n"),
                      Contains("'" + c.key + "'") && Contains(c.message) && Contains("hooks.toml"));
  }
}

// ---- exact resume, through wick fit -------------------------------------------------------

namespace {

// A small CNN on the first 512 Fashion-MNIST images: 16 steps of 32 per epoch, 3 epochs.
std::string cnn_config(const TempDir& d, const std::string& hooks) {
  return "[trainer]\nepochs = 3\nseed = 4\nbatch_size = 32\nvalid_batch_size = 256\n"
         "log_every = 4\nthreads = 1\noutput_dir = \"" +
         (d / "run").string() +
         "\"\n[task]\nplugin = \"fashion_mnist\"\nmodel = \"cnn\"\nchannels = [4, 8]\n"
         "batch_norm = true\nhidden = [16]\nlimit = 512\n"
         "[optimizer]\nname = \"adam\"\nlr = 0.003\n"
         "[[hooks]]\nplugin = \"checkpoint\"\nevery_n_steps = 5\n" +
         hooks + wick::test::test_plugins_toml();
}

void killed_then_resumed(const std::string& hooks, int step) {
  TempDir ref;
  wick::test::write_file(ref / "cfg.toml", cnn_config(ref, hooks));
  auto r0 = wick::test::run_wick({"fit", (ref / "cfg.toml").string()});
  INFO(r0.err << r0.out);
  REQUIRE(r0.exit_code == 0);

  TempDir d;
  wick::test::write_file(d / "cfg.toml",
                         cnn_config(d, hooks +
                                           "[[hooks]]\nplugin = \"fault\"\naction = \"kill\"\n"
                                           "step = " +
                                           std::to_string(step) + "\n"));
  auto r1 = wick::test::run_wick({"fit", (d / "cfg.toml").string()});
  INFO(r1.err << r1.out);
  REQUIRE(r1.exit_code == 128 + 9);
  auto r2 = wick::test::run_wick({"fit", (d / "cfg.toml").string(), "--resume", "latest", "--set",
                                  "hooks.fault.enabled=false"});
  INFO(r2.err << r2.out);
  REQUIRE(r2.exit_code == 0);
  CHECK(r2.err.find("starts afresh") == std::string::npos);
  auto a = wick::test::read_json(ref / "run" / "summary.json");
  auto b = wick::test::read_json(d / "run" / "summary.json");
  CHECK(b["model_fingerprint"] == a["model_fingerprint"]);
  CHECK(wick::test::logged_values(d) == wick::test::logged_values(ref));
}

}  // namespace

TEST_CASE("kill -9 then resume is exact with channels_last, bf16, label_smoothing, mixup, sam, swa",
          "[algorithms][resume]") {
  // Step 22 is mid-epoch 1, after swa's first average would start at its end; the last
  // checkpoint (step 20) is two steps back. bf16 named, not "auto": fp32 on a CPU without
  // native bf16 would leave bf16's resume untested there.
  killed_then_resumed(
      "[[hooks]]\nplugin = \"channels_last\"\n[[hooks]]\nplugin = \"mixed_precision\"\n"
      "dtype = \"bf16\"\n"
      "[[hooks]]\nplugin = \"label_smoothing\"\n[[hooks]]\nplugin = \"mixup\"\n"
      "[[hooks]]\nplugin = \"sam\"\n[[hooks]]\nplugin = \"swa\"\nstart_epoch = 1\n",
      22);
}

TEST_CASE("kill -9 then resume is exact with cutmix, freeze and swa", "[algorithms][resume]") {
  // Step 38 is in epoch 2: freeze has let go, swa holds epoch 1's weights.
  killed_then_resumed(
      "[[hooks]]\nplugin = \"cutmix\"\n[[hooks]]\nplugin = \"freeze\"\npatterns = [\"0.*\"]\n"
      "until_epoch = 1\n[[hooks]]\nplugin = \"swa\"\nstart_epoch = 1\n",
      38);
}
