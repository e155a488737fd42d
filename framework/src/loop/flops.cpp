#include "loop/flops.hpp"

#include <ATen/record_function.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>

namespace wick {

namespace {

// The counter of this thread (callbacks are plain function pointers) and how deep the thread
// is inside counted ops.
thread_local FlopCounter* t_counter = nullptr;
thread_local int t_depth = 0;
thread_local int t_with_backward = 0;  // CountWithBackward scopes open on this thread

enum class Op { none, addmm, mm, bmm, baddbmm, conv };

Op op_of(const char* name) {
  if (std::strncmp(name, "aten::", 6) != 0) return Op::none;
  const char* n = name + 6;
  if (!std::strcmp(n, "addmm")) return Op::addmm;
  if (!std::strcmp(n, "mm")) return Op::mm;
  if (!std::strcmp(n, "bmm")) return Op::bmm;
  if (!std::strcmp(n, "baddbmm")) return Op::baddbmm;
  if (!std::strcmp(n, "convolution")) return Op::conv;
  return Op::none;
}

// What the end callback needs of a convolution's inputs, read at its start: LibTorch 2.x lets a
// callback read the inputs only there (they are gone by the end).
struct Counted : at::ObserverContext {
  Op op;
  std::vector<std::int64_t> input, weight;
  bool transposed = false, bias = false;
  bool backward = false;  // it will have a backward (see FlopCounter::train_flops)
  explicit Counted(Op o) : op(o) {}
};

const at::IValue* input_at(const at::RecordFunction& fn, std::size_t i) {
  const auto in = fn.inputs();
  return i < in.size() && in[i].isTensor() ? &in[i] : nullptr;
}

at::IntArrayRef sizes_of(const at::RecordFunction& fn, std::size_t i) {
  const auto* v = input_at(fn, i);
  return v ? v->toTensor().sizes() : at::IntArrayRef{};
}

// Whether the op's backward will run: grad mode on, and one of these inputs needs a gradient.
bool has_backward(const at::RecordFunction& fn, std::initializer_list<std::size_t> inputs) {
  if (t_with_backward > 0) return true;
  if (!c10::GradMode::is_enabled()) return false;
  for (const auto i : inputs)
    if (const auto* v = input_at(fn, i); v && v->toTensor().requires_grad()) return true;
  return false;
}

double product(at::IntArrayRef s, std::size_t from = 0) {
  double p = 1;
  for (std::size_t i = from; i < s.size(); ++i) p *= static_cast<double>(s[i]);
  return p;
}

}  // namespace

struct FlopCallbacks {
  // [..., M, K] x [K, N] (or batched [B, M, K] x [B, K, N]): B*M*N*K multiply-adds, and the
  // product's shape kept for the peak probe; the add of addmm / baddbmm counts M*N each.
  static void matmul(FlopCounter& c, const at::RecordFunction& fn, std::size_t a, std::size_t b,
                     bool add) {
    const auto x = sizes_of(fn, a), y = sizes_of(fn, b);
    if (x.size() < 2 || y.size() < 2) return;
    MatmulShape s;
    s.m = x[x.size() - 2];
    s.k = x[x.size() - 1];
    s.n = y[y.size() - 1];
    s.b = static_cast<std::int64_t>(product(x.slice(0, x.size() - 2)));
    s.dtype = static_cast<int>(input_at(fn, a)->toTensor().scalar_type());
    s.backward = add ? has_backward(fn, {0, a, b}) : has_backward(fn, {a, b});
    record(c, s, add);
  }

  static void record(FlopCounter& c, const MatmulShape& s, bool add) {
    const double f = s.flops() + (add ? static_cast<double>(s.b * s.m * s.n) : 0.0);
    c.flops_ += f;
    c.train_flops_ += s.backward ? 3 * f : f;
    c.matmuls_.push_back(s);
  }

  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    FlopCounter* c = t_counter;
    if (!c) return nullptr;
    const Op op = op_of(fn.name());
    if (op == Op::none || t_depth > 0) return nullptr;
    ++t_depth;
    switch (op) {
      case Op::mm:
      case Op::bmm:
        matmul(*c, fn, 0, 1, false);
        break;
      case Op::addmm:
      case Op::baddbmm:
        matmul(*c, fn, 1, 2, true);
        break;
      default:
        break;  // convolution: at the end, from its output
    }
    auto counted = std::make_unique<Counted>(op);
    if (op == Op::conv) {
      // convolution(input, weight, bias, stride, padding, dilation, transposed, ...)
      const auto in = fn.inputs();
      counted->input = sizes_of(fn, 0).vec();
      counted->weight = sizes_of(fn, 1).vec();
      counted->transposed = in.size() > 6 && in[6].isBool() && in[6].toBool();
      counted->bias = in.size() > 2 && in[2].isTensor() && in[2].toTensor().defined();
      counted->backward = has_backward(fn, {0, 1, 2});
      if (const auto* x = input_at(fn, 0))
        c->conv_dtype_ = static_cast<int>(x->toTensor().scalar_type());
    }
    return counted;
  }

  static void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
    if (!ctx) return;
    --t_depth;
    FlopCounter* c = t_counter;
    const auto& k = *static_cast<Counted*>(ctx);
    if (!c || k.op != Op::conv) return;
    // The weight is [C_out, C_in / groups, k...] ([C_in, C_out / groups, k...] when transposed).
    const auto& w = k.weight;
    if (w.size() < 3 || fn.outputs().empty() || !fn.outputs()[0].isTensor()) return;
    const double kernel = product(w, 2);
    const double out = static_cast<double>(fn.outputs()[0].toTensor().numel());
    const double macs = k.transposed ? product(k.input) * static_cast<double>(w[1]) * kernel
                                     : out * static_cast<double>(w[1]) * kernel;
    const double f = 2.0 * macs + (k.bias ? out : 0.0);
    c->flops_ += f;
    c->train_flops_ += k.backward ? 3 * f : f;
  }
};

FlopCounter::FlopCounter() : outer_(t_counter) {
  t_counter = this;
  t_depth = 0;
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&FlopCallbacks::on_start, &FlopCallbacks::on_end)
          .needsInputs(true)
          .needsOutputs(true)
          .scopes({at::RecordScope::FUNCTION}));
}

FlopCounter::~FlopCounter() {
  at::removeCallback(handle_);
  t_counter = outer_;
}

CountWithBackward::CountWithBackward(bool trains) : on_(trains) {
  if (on_) ++t_with_backward;
}

CountWithBackward::~CountWithBackward() {
  if (on_) --t_with_backward;
}

void count_matmul(MatmulShape s, bool bias) {
  if (!t_counter || t_depth > 0) return;
  s.backward = t_with_backward > 0;
  FlopCallbacks::record(*t_counter, s, bias);
}

double probe_peak_gflops(const std::vector<MatmulShape>& shapes, bool with_backward, double seconds,
                         ProbeDevice device) {
  torch::NoGradGuard g;
  // Each product as a step runs it; with its backward: dX = dY W^T is (m x n) @ (n x k), and
  // dW = X^T dY is (k x m) @ (m x n). Each distinct one with the times a step runs it.
  std::vector<std::pair<MatmulShape, int>> all;
  auto add = [&](const MatmulShape& s) {
    for (auto& [t, times] : all)
      if (t.b == s.b && t.m == s.m && t.k == s.k && t.n == s.n && t.dtype == s.dtype) {
        ++times;
        return;
      }
    all.emplace_back(s, 1);
  };
  for (const auto& s : shapes) {
    add(s);
    if (!with_backward || !s.backward) continue;
    add({s.b, s.m, s.n, s.k, s.dtype});
    add({s.b, s.k, s.m, s.n, s.dtype});
  }
  struct Operands {
    at::Tensor a, b, c;
    int times;
  };
  std::vector<Operands> ops;
  double flops = 0;
  const auto where = device.cuda
                         ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device.index))
                         : torch::Device(torch::kCPU);
  for (const auto& [shape_of, times] : all) {
    const MatmulShape& s = shape_of;  // a lambda captures no structured binding (C++17)
    const auto o =
        torch::TensorOptions().dtype(static_cast<c10::ScalarType>(s.dtype)).device(where);
    // Fixed values: the probe must not move the global generator (a resumed run would draw
    // other numbers than an uninterrupted one).
    // Plain products as plain matrices (as Linear runs them), batched ones batched.
    auto shape = [&](std::int64_t r, std::int64_t c) {
      return s.b == 1 ? std::vector<std::int64_t>{r, c} : std::vector<std::int64_t>{s.b, r, c};
    };
    ops.push_back({torch::full(shape(s.m, s.k), 0.5, o), torch::full(shape(s.k, s.n), 0.25, o),
                   torch::empty(shape(s.m, s.n), o), times});
    flops += s.flops() * times;
  }
  if (ops.empty() || flops <= 0) return 0;
  // A round of the products; on a GPU, waited for (the host only queues them).
  auto once = [&] {
    for (auto& o : ops)
      for (int t = 0; t < o.times; ++t)
        if (o.a.dim() == 2)
          torch::mm_out(o.c, o.a, o.b);
        else
          torch::bmm_out(o.c, o.a, o.b);
    if (device.cuda) torch::cuda::synchronize(device.index);
  };
  using Clock = std::chrono::steady_clock;
  // Warm-up: threads started, pages touched, the cores' clock up.
  for (const auto t_warm = Clock::now() + std::chrono::milliseconds(50); Clock::now() < t_warm;)
    once();
  double best = 0;
  const auto t_end = Clock::now() + std::chrono::duration<double>(seconds);
  for (int reps = 0; reps < 3 || Clock::now() < t_end; ++reps) {
    const auto t0 = Clock::now();
    once();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt > 0) best = std::max(best, flops / dt / 1e9);
    if (reps >= 100000) break;
  }
  return best;
}

}  // namespace wick
