// mixup (Zhang et al., 2018): each training input becomes lam * x + (1 - lam) * x[perm], and
// the loss lam * loss(y) + (1 - lam) * loss(y[perm]) (see mixing.hpp).
#include "mixing.hpp"

namespace {

class Mixup : public wick::mixing::Mixing {
 public:
  explicit Mixup(const wick::Params& p) : Mixing(p, "mixup", 0x6d6978ull) {}

 protected:
  double mix(at::Tensor& input, const at::Tensor& perm, double lam, at::Generator&) override {
    if (!input.is_floating_point())
      throw std::runtime_error("mixup needs floating-point inputs; this batch's input is " +
                               std::string(c10::toString(input.scalar_type())));
    input = input.mul(lam).add_(input.index_select(0, perm), 1 - lam);
    return lam;
  }
};

}  // namespace

WICK_PLUGIN(Mixup,
            wick::PluginDef("mixup", "1.0.0",
                            "mixup: train on convex combinations of pairs of samples "
                            "and of their losses")
                .order(-8)
                .param_float("alpha", 0.2, "the mixing weight is drawn from Beta(alpha, alpha)"))
