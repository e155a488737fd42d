#include "loop/flops.hpp"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <cstring>

namespace wick {

namespace {

// The counter of this thread (callbacks are plain function pointers) and how deep the thread
// is inside counted ops.
thread_local FlopCounter* t_counter = nullptr;
thread_local double* t_flops = nullptr;
thread_local int t_depth = 0;

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
  explicit Counted(Op o) : op(o) {}
};

at::IntArrayRef sizes_of(const at::RecordFunction& fn, std::size_t i) {
  const auto in = fn.inputs();
  if (i >= in.size() || !in[i].isTensor()) return {};
  return in[i].toTensor().sizes();
}

double product(at::IntArrayRef s, std::size_t from = 0) {
  double p = 1;
  for (std::size_t i = from; i < s.size(); ++i) p *= static_cast<double>(s[i]);
  return p;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (!t_flops) return nullptr;
  const Op op = op_of(fn.name());
  if (op == Op::none || t_depth > 0) return nullptr;
  ++t_depth;
  // [M, K] x [K, N]: M*N*K multiply-adds; the batched forms B times that.
  auto mat = [&](std::size_t a, std::size_t b) {
    const auto x = sizes_of(fn, a), y = sizes_of(fn, b);
    if (x.size() < 2 || y.size() < 2) return 0.0;
    return 2.0 * product(x) * static_cast<double>(y[y.size() - 1]);
  };
  switch (op) {
    case Op::mm:
    case Op::bmm:
      *t_flops += mat(0, 1);
      break;
    case Op::addmm:
    case Op::baddbmm: {
      const double f = mat(1, 2);
      const auto x = sizes_of(fn, 1);
      const auto y = sizes_of(fn, 2);
      *t_flops +=
          f + (x.size() >= 2 && y.size() >= 2 ? product(x) / static_cast<double>(x[x.size() - 1]) *
                                                    static_cast<double>(y[y.size() - 1])
                                              : 0.0);
      break;
    }
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
  }
  return counted;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (!ctx) return;
  --t_depth;
  const auto& c = *static_cast<Counted*>(ctx);
  if (!t_flops || c.op != Op::conv) return;
  // The weight is [C_out, C_in / groups, k...] ([C_in, C_out / groups, k...] when transposed).
  const auto& w = c.weight;
  if (w.size() < 3 || fn.outputs().empty() || !fn.outputs()[0].isTensor()) return;
  const double kernel = product(w, 2);
  const double out = static_cast<double>(fn.outputs()[0].toTensor().numel());
  const double macs = c.transposed ? product(c.input) * static_cast<double>(w[1]) * kernel
                                   : out * static_cast<double>(w[1]) * kernel;
  *t_flops += 2.0 * macs + (c.bias ? out : 0.0);
}

}  // namespace

FlopCounter::FlopCounter() : outer_(t_counter) {
  t_counter = this;
  t_flops = &flops_;
  t_depth = 0;
  handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                           .needsInputs(true)
                                           .needsOutputs(true)
                                           .scopes({at::RecordScope::FUNCTION}));
}

FlopCounter::~FlopCounter() {
  at::removeCallback(handle_);
  t_counter = outer_;
  t_flops = outer_ ? &outer_->flops_ : nullptr;
}

}  // namespace wick
