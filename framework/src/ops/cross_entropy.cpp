// wick::cross_entropy (wick/losses.hpp): an autograd function over wick's kernels, the CUDA
// module's (cuda/cross_entropy_kernel.cu) on a GPU, cpu/cross_entropy_kernel.cpp's for float32
// and bfloat16 on the CPU; elsewhere LibTorch's log-softmax and NLL.
#include "wick/losses.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "cpu/cross_entropy_kernel.hpp"
#include "cuda/cuda_support.hpp"
#include "cuda/own_kernels.hpp"
#include "ops/cpu_data.hpp"

namespace wick {
namespace {

namespace ag = torch::autograd;

// Rows per task on LibTorch's threads.
constexpr std::int64_t kRowGrain = 64;

// The CPU side of the CUDA module's two calls (cuda/cuda_support.hpp): float32 or bfloat16
// logits [rows, classes] and int64 ids, both contiguous; every id a class or ignore_index. The
// rows' losses and log-sum-exps ([rows, 2]: maximum, log of the shifted sum) come in float32.
std::pair<at::Tensor, at::Tensor> cpu_rows(const at::Tensor& logits, const at::Tensor& target,
                                           std::int64_t ignore_index) {
  const auto rows = logits.size(0), classes = logits.size(1);
  const auto options = logits.options().dtype(at::kFloat);
  auto loss = at::empty({rows}, options), stats = at::empty({rows, 2}, options);
  const std::int64_t* t = target.data_ptr<std::int64_t>();
  float *l = loss.data_ptr<float>(), *s = stats.data_ptr<float>();
  with_cpu_type(logits.scalar_type(), [&](auto type) {
    const auto* x = cpu_data<decltype(type)>(logits);
    at::parallel_for(0, rows, kRowGrain, [&](std::int64_t b, std::int64_t e) {
      cpu::cross_entropy_rows(x + b * classes, t + b, e - b, classes, ignore_index, l + b,
                              s + 2 * b);
    });
  });
  return {loss, stats};
}

at::Tensor cpu_grad(const at::Tensor& logits, const at::Tensor& target, const at::Tensor& stats,
                    const at::Tensor& scale, std::int64_t ignore_index) {
  const auto rows = logits.size(0), classes = logits.size(1);
  auto grad = at::empty_like(logits);
  const float* s = stats.data_ptr<float>();
  const std::int64_t* t = target.data_ptr<std::int64_t>();
  const float k = scale.item<float>();
  with_cpu_type(logits.scalar_type(), [&](auto type) {
    using T = decltype(type);
    const T* x = cpu_data<T>(logits);
    T* g = cpu_data<T>(grad);
    at::parallel_for(0, rows, kRowGrain, [&](std::int64_t b, std::int64_t e) {
      cpu::cross_entropy_grad(x + b * classes, t + b, s + 2 * b, e - b, classes, ignore_index, k,
                              g + b * classes);
    });
  });
  return grad;
}

// The rows' sum with the same bits on any thread count (as LibTorch's loss has it): at::sum
// splits one output's reduction among the threads for a large input; fixed chunks, one output
// each, are each summed by one thread.
at::Tensor fixed_order_sum(const at::Tensor& rows) {
  constexpr std::int64_t kChunk = 4096;
  const auto n = rows.numel();
  if (rows.is_cuda() || n <= kChunk) return rows.sum();
  const auto v = rows.reshape({-1});
  const auto whole = n / kChunk * kChunk;
  auto parts = v.narrow(0, 0, whole).view({n / kChunk, kChunk}).sum(1);
  if (whole < n) parts = at::cat({parts, v.narrow(0, whole, n - whole).sum().unsqueeze(0)});
  return parts.sum();
}

// Saves the logits (as LibTorch's log-softmax saves its output: the same size) and the rows'
// log-sum-exps; on a GPU the mean's count stays on the device, so nothing waits for it.
class FusedCrossEntropy : public ag::Function<FusedCrossEntropy> {
 public:
  static at::Tensor forward(ag::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& target, std::int64_t ignore_index) {
    auto [rows, lse] = logits.is_cuda() ? cuda::cross_entropy_rows(logits, target, ignore_index)
                                        : cpu_rows(logits, target, ignore_index);
    const auto count = target.ne(ignore_index).sum().to(at::kFloat);
    ctx->save_for_backward({logits, target, lse, count});
    ctx->saved_data["ignore_index"] = ignore_index;
    return fixed_order_sum(rows) / count;
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto scale = grads[0].to(at::kFloat) / saved[3];
    const auto ignore_index = ctx->saved_data["ignore_index"].toInt();
    return {saved[0].is_cuda()
                ? cuda::cross_entropy_grad(saved[0], saved[1], saved[2], scale, ignore_index)
                : cpu_grad(saved[0], saved[1], saved[2], scale, ignore_index),
            at::Tensor(), at::Tensor()};
  }
};

// A CPU target that is neither a class nor ignore_index stops the call, as in LibTorch.
void check_targets(const at::Tensor& ids, std::int64_t classes, std::int64_t ignore_index) {
  const auto bad = ids.ne(ignore_index).logical_and(ids.lt(0).logical_or(ids.ge(classes)));
  if (!bad.any().item<bool>()) return;
  const auto pos = bad.nonzero()[0][0].item<std::int64_t>();
  throw std::invalid_argument(
      "wick::cross_entropy: target " + std::to_string(ids[pos].item<std::int64_t>()) +
      " at position " + std::to_string(pos) + " is not a class id in [0, " +
      std::to_string(classes) + ") nor ignore_index (" + std::to_string(ignore_index) + ")");
}

bool fused_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

}  // namespace

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                         std::int64_t ignore_index) {
  const auto lead =
      logits.dim() > 0 ? logits.sizes().slice(0, logits.dim() - 1) : at::IntArrayRef{};
  if (logits.dim() < 1 || target.sizes() != lead ||
      !at::isIntegralType(target.scalar_type(), false) || target.device() != logits.device()) {
    std::ostringstream m;
    m << "wick::cross_entropy: logits [..., classes] and integer targets [...] of the same "
         "leading shape on one device, got logits "
      << logits.sizes() << " on " << logits.device() << " and " << target.scalar_type()
      << " targets " << target.sizes() << " on " << target.device();
    throw std::invalid_argument(m.str());
  }
  const auto classes = logits.size(-1);
  const auto flat = logits.reshape({-1, classes});
  const auto ids = target.reshape({-1}).to(at::kLong);
  if (logits.is_cuda() && fused_type(logits.scalar_type()) &&
      !cuda::hidden(cuda::OwnKernel::cross_entropy))
    return FusedCrossEntropy::apply(flat.contiguous(), ids.contiguous(), ignore_index);
  if (logits.device().is_cpu() && cpu_kernel_type(logits.scalar_type())) {
    check_targets(ids, classes, ignore_index);
    return FusedCrossEntropy::apply(flat.contiguous(), ids.contiguous(), ignore_index);
  }
  return at::nll_loss(at::log_softmax(flat, -1).to(at::kFloat), ids, {}, at::Reduction::Mean,
                      ignore_index);
}

}  // namespace wick
