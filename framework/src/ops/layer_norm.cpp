// wick::layer_norm and wick::add_layer_norm (wick/normalization.hpp): autograd functions over
// wick's kernels, the CUDA module's (cuda/layer_norm_kernel.cu) on a GPU and
// cpu/layer_norm_kernel.cpp's on the CPU (bf16 rows widened into float a few rows at a time);
// elsewhere LibTorch's layer_norm.
#include "wick/normalization.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/bf16.hpp"
#include "cpu/layer_norm_kernel.hpp"
#include "cuda/cuda_support.hpp"
#include "cuda/own_kernels.hpp"
#include "ops/autocast.hpp"
#include "ops/cpu_data.hpp"

namespace wick {
namespace {

namespace ag = torch::autograd;

// Rows per task on LibTorch's threads, and rows widened into float at a time within a task.
// The backward's weight and bias gradients are summed per task, then over the tasks in order:
// a fixed number of tasks for a given row count, so the sums do not depend on the threads.
constexpr std::int64_t kRowsPerTask = 64, kRowsPerChunk = 8;

// Rows [r0, r0 + n) of a contiguous [rows, width] float32 or bf16 tensor as floats: the
// tensor's own memory, or widened into `buf`.
const float* float_rows(const at::Tensor& t, std::int64_t r0, std::int64_t n, std::int64_t width,
                        std::vector<float>& buf) {
  if (t.scalar_type() == at::kFloat) return t.data_ptr<float>() + r0 * width;
  buf.resize(static_cast<std::size_t>(n * width));
  cpu::widen_rows(cpu_data<cpu::Bf16>(t) + r0 * width, width, n, width, buf.data());
  return buf.data();
}

// Where float results for rows [r0, r0 + n) of `t` go: its memory if float32, else `buf`,
// which store_rows then narrows into it.
float* float_out(const at::Tensor& t, std::int64_t r0, std::int64_t n, std::int64_t width,
                 std::vector<float>& buf) {
  if (t.scalar_type() == at::kFloat) return t.data_ptr<float>() + r0 * width;
  buf.resize(static_cast<std::size_t>(n * width));
  return buf.data();
}

void store_rows(const float* from, const at::Tensor& t, std::int64_t r0, std::int64_t n,
                std::int64_t width) {
  if (t.scalar_type() == at::kFloat) {
    float* to = t.data_ptr<float>() + r0 * width;
    if (to != from) std::memcpy(to, from, static_cast<std::size_t>(n * width) * sizeof(float));
  } else {
    cpu::narrow_rows(from, n, width, cpu_data<cpu::Bf16>(t) + r0 * width, width);
  }
}

// The forward's tensors, all contiguous [rows, width] (mean, rstd [rows]; weight, bias
// [width], float32): x, and branch (undefined, or added to a float32 x into s).
void cpu_forward(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                 const at::Tensor& bias, float eps, const at::Tensor& s, const at::Tensor& y,
                 const at::Tensor& mean, const at::Tensor& rstd) {
  const auto rows = x.size(0), width = x.size(1);
  const float *w = weight.data_ptr<float>(), *b = bias.data_ptr<float>();
  float *m = mean.data_ptr<float>(), *rs = rstd.data_ptr<float>();
  at::parallel_for(0, rows, kRowsPerTask, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> xb, bb, yb;
    for (std::int64_t r0 = begin; r0 < end; r0 += kRowsPerChunk) {
      const std::int64_t n = std::min(kRowsPerChunk, end - r0);
      const float* xp = float_rows(x, r0, n, width, xb);
      const float* bp = branch.defined() ? float_rows(branch, r0, n, width, bb) : nullptr;
      float* sp = branch.defined() ? s.data_ptr<float>() + r0 * width : nullptr;
      float* yp = float_out(y, r0, n, width, yb);
      cpu::layer_norm_forward(xp, bp, sp, n, width, w, b, eps, yp, m + r0, rs + r0);
      store_rows(yp, y, r0, n, width);
    }
  });
}

// The backward's: s (the normalised rows) and dx in s's type, dy in y's, ds (undefined, or
// float32 as s is then), d_branch (undefined, or dx again in the branch's type); dw, db
// float32 [width].
void cpu_backward(const at::Tensor& s, const at::Tensor& dy, const at::Tensor& ds,
                  const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& rstd,
                  const at::Tensor& dx, const at::Tensor& d_branch, const at::Tensor& dw,
                  const at::Tensor& db) {
  const auto rows = s.size(0), width = s.size(1);
  const std::int64_t tasks = std::max<std::int64_t>(1, (rows + kRowsPerTask - 1) / kRowsPerTask);
  auto partial = at::zeros({tasks, 2, width}, weight.options());
  const float *w = weight.data_ptr<float>(), *m = mean.data_ptr<float>(),
              *rs = rstd.data_ptr<float>();
  float* part = partial.data_ptr<float>();
  at::parallel_for(0, tasks, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> sb, gb, xb;
    for (std::int64_t t = t0; t < t1; ++t) {
      float *pw = part + 2 * t * width, *pb = pw + width;
      const std::int64_t end = std::min(rows, (t + 1) * kRowsPerTask);
      for (std::int64_t r0 = t * kRowsPerTask; r0 < end; r0 += kRowsPerChunk) {
        const std::int64_t n = std::min(kRowsPerChunk, end - r0);
        const float* sp = float_rows(s, r0, n, width, sb);
        const float* gp = float_rows(dy, r0, n, width, gb);
        const float* dsp = ds.defined() ? ds.data_ptr<float>() + r0 * width : nullptr;
        float* xp = float_out(dx, r0, n, width, xb);
        cpu::layer_norm_backward(sp, gp, dsp, n, width, w, m + r0, rs + r0, xp, pw, pb);
        store_rows(xp, dx, r0, n, width);
        if (d_branch.defined()) store_rows(xp, d_branch, r0, n, width);
      }
    }
  });
  const auto sums = partial.sum(0);
  dw.copy_(sums[0]);
  db.copy_(sums[1]);
}

void run_forward(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                 const at::Tensor& bias, float eps, const at::Tensor& s, const at::Tensor& y,
                 const at::Tensor& mean, const at::Tensor& rstd) {
  if (x.is_cuda())
    cuda::layer_norm_forward(x, branch, weight, bias, eps, s, y, mean, rstd);
  else
    cpu_forward(x, branch, weight, bias, eps, s, y, mean, rstd);
}

// The gradients of x (and the branch) and of weight and bias, from the saved rows.
ag::variable_list run_backward(const at::Tensor& s, at::Tensor dy, const at::Tensor& ds,
                               const at::Tensor& weight, const at::Tensor& mean,
                               const at::Tensor& rstd, at::ScalarType y_type,
                               at::ScalarType branch_type, bool with_branch) {
  const auto width = s.size(-1);
  // Nothing reached y (only s was used): the sum's gradient is s's alone, and weight and bias
  // get none (as `residual + branch` then at::layer_norm gives; a pass with dy = 0 made zero
  // gradients, which an optimizer would decay, and 0 * inf a NaN where a row's rstd is inf).
  if (!dy.defined()) {
    const auto d = ds.defined() ? ds.to(s.scalar_type()) : at::zeros_like(s);
    if (!with_branch) return {d, at::Tensor(), at::Tensor()};
    return {d, branch_type != s.scalar_type() ? d.to(branch_type) : d, at::Tensor(), at::Tensor()};
  }
  dy = dy.to(y_type).reshape({-1, width}).contiguous();
  const auto rows2 = s.reshape({-1, width});
  const auto ds2 = ds.defined() ? ds.to(s.scalar_type()).reshape({-1, width}).contiguous() : ds;
  auto dx = at::empty_like(s);
  // A float branch takes the very gradient of the residual (as `residual + branch` does).
  const bool own_branch = with_branch && branch_type != s.scalar_type();
  const auto d_branch =
      own_branch ? at::empty_like(s, s.options().dtype(branch_type)) : at::Tensor();
  auto dw = at::empty_like(weight), db = at::empty_like(weight);
  const auto dx2 = dx.view({-1, width});
  const auto dbr2 = own_branch ? d_branch.view({-1, width}) : d_branch;
  if (s.is_cuda())
    cuda::layer_norm_backward(rows2, dy, ds2, weight, mean, rstd, dx2, dbr2, dw, db);
  else
    cpu_backward(rows2, dy, ds2, weight, mean, rstd, dx2, dbr2, dw, db);
  if (!with_branch) return {dx, dw, db};
  return {dx, own_branch ? d_branch : dx, dw, db};
}

class LayerNorm : public ag::Function<LayerNorm> {
 public:
  static at::Tensor forward(ag::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, at::ScalarType y_type) {
    const auto width = x.size(-1), rows = x.numel() / width;
    auto y = at::empty(x.sizes(), x.options().dtype(y_type));
    const auto stat = x.options().dtype(at::kFloat);
    auto mean = at::empty({rows}, stat), rstd = at::empty({rows}, stat);
    run_forward(x.view({rows, width}), {}, weight, bias, static_cast<float>(eps), {},
                y.view({rows, width}), mean, rstd);
    ctx->save_for_backward({x, weight, mean, rstd});
    return y;
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto g = run_backward(saved[0], grads[0], {}, saved[1], saved[2], saved[3],
                          grads[0].scalar_type(), saved[0].scalar_type(), false);
    g.resize(5);  // eps and the type take none
    return g;
  }
};

class AddLayerNorm : public ag::Function<AddLayerNorm> {
 public:
  static ag::variable_list forward(ag::AutogradContext* ctx, const at::Tensor& residual,
                                   const at::Tensor& branch, const at::Tensor& weight,
                                   const at::Tensor& bias, double eps, at::ScalarType y_type) {
    const auto width = residual.size(-1), rows = residual.numel() / width;
    auto s = at::empty_like(residual);
    auto y = at::empty(residual.sizes(), residual.options().dtype(y_type));
    const auto stat = residual.options().dtype(at::kFloat);
    auto mean = at::empty({rows}, stat), rstd = at::empty({rows}, stat);
    run_forward(residual.view({rows, width}), branch.view({rows, width}), weight, bias,
                static_cast<float>(eps), s.view({rows, width}), y.view({rows, width}), mean, rstd);
    // s unused downstream (the last block's sum) leaves its gradient undefined, not zeros.
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({s, weight, mean, rstd});
    ctx->saved_data["y_type"] = static_cast<std::int64_t>(y_type);
    ctx->saved_data["branch_type"] = static_cast<std::int64_t>(branch.scalar_type());
    return {s, y};
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto y_type = static_cast<at::ScalarType>(ctx->saved_data["y_type"].toInt());
    const auto branch_type = static_cast<at::ScalarType>(ctx->saved_data["branch_type"].toInt());
    auto g = run_backward(saved[0], grads[1], grads[0], saved[1], saved[2], saved[3], y_type,
                          branch_type, true);
    g.resize(6);
    return g;
  }
};

// The result's type: bf16 under bf16 autocast on the tensor's device, else `natural`.
at::ScalarType normalized_type(const at::Tensor& x, at::ScalarType natural) {
  return bf16_autocast(x.device().type()) ? at::kBFloat16 : natural;
}

// Whether wick's kernels take x with this weight and bias.
bool own_kernel(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const auto width = x.size(-1);
  const auto param = [&](const at::Tensor& p) {
    return p.defined() && p.scalar_type() == at::kFloat && p.dim() == 1 && p.size(0) == width &&
           p.device() == x.device() && p.layout() == at::kStrided;
  };
  const bool device =
      x.device().is_cpu() || (x.is_cuda() && !cuda::hidden(cuda::OwnKernel::layer_norm));
  return device && x.layout() == at::kStrided && cpu_kernel_type(x.scalar_type()) && width > 0 &&
         x.numel() > 0 && param(weight) && param(bias);
}

void check_rows(const char* fn, const at::Tensor& x) {
  if (x.defined() && x.dim() >= 1) return;
  throw std::invalid_argument(std::string("wick::") + fn +
                              ": a tensor [..., width] to normalise over its last dimension, got " +
                              (x.defined() ? "a 0-dimensional tensor" : "an undefined tensor"));
}

}  // namespace

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps) {
  check_rows("layer_norm", x);
  const auto y_type = normalized_type(x, x.scalar_type());
  if (own_kernel(x, weight, bias))
    return LayerNorm::apply(x.contiguous(), weight.contiguous(), bias.contiguous(), eps, y_type);
  return at::layer_norm(x, {x.size(-1)}, weight, bias, eps).to(y_type);
}

std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& residual,
                                                 const at::Tensor& branch, const at::Tensor& weight,
                                                 const at::Tensor& bias, double eps) {
  check_rows("add_layer_norm", residual);
  if (!branch.defined() || branch.sizes() != residual.sizes() ||
      branch.device() != residual.device()) {
    std::ostringstream m;
    m << "wick::add_layer_norm: residual and branch of one shape on one device, got "
      << residual.sizes() << " on " << residual.device() << " and ";
    if (branch.defined())
      m << branch.sizes() << " on " << branch.device();
    else
      m << "no branch";
    throw std::invalid_argument(m.str());
  }
  if (residual.scalar_type() == at::kFloat && cpu_kernel_type(branch.scalar_type()) &&
      branch.layout() == at::kStrided && own_kernel(residual, weight, bias)) {
    const auto out =
        AddLayerNorm::apply(residual.contiguous(), branch.contiguous(), weight.contiguous(),
                            bias.contiguous(), eps, normalized_type(residual, at::kFloat));
    return {out[0], out[1]};
  }
  auto s = residual + branch;
  return {s, layer_norm(s, weight, bias, eps)};
}

}  // namespace wick
