// wick::cross_entropy (wick/losses.hpp): on a GPU, an autograd function over the CUDA module's
// kernels (cross_entropy_kernel.cu); elsewhere LibTorch's log-softmax and NLL.
#include "wick/losses.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "cuda/cuda_support.hpp"

namespace wick {
namespace {

namespace ag = torch::autograd;

// Saves the logits (as LibTorch's log-softmax saves its output: the same size) and the rows'
// log-sum-exps; the mean's count stays on the device, so nothing waits for the GPU.
class FusedCrossEntropy : public ag::Function<FusedCrossEntropy> {
 public:
  static at::Tensor forward(ag::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& target, std::int64_t ignore_index) {
    auto [rows, lse] = cuda::cross_entropy_rows(logits, target, ignore_index);
    const auto count = target.ne(ignore_index).sum().to(at::kFloat);
    ctx->save_for_backward({logits, target, lse, count});
    ctx->saved_data["ignore_index"] = ignore_index;
    return rows.sum() / count;
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto scale = grads[0].to(at::kFloat) / saved[3];
    return {cuda::cross_entropy_grad(saved[0], saved[1], saved[2], scale,
                                     ctx->saved_data["ignore_index"].toInt()),
            at::Tensor(), at::Tensor()};
  }
};

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
  if (logits.is_cuda() && fused_type(logits.scalar_type()))
    return FusedCrossEntropy::apply(flat.contiguous(), ids.contiguous(), ignore_index);
  return at::nll_loss(at::log_softmax(flat, -1).to(at::kFloat), ids, {}, at::Reduction::Mean,
                      ignore_index);
}

}  // namespace wick
