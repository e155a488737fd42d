// CutMix (Yun et al., 2019): a box of each training image [N, C, H, W] is replaced by the same
// box of another image of the batch. lam ~ Beta(alpha, alpha) sets the box's area to about
// (1 - lam) of the image, centred at a uniform random pixel and clipped to the image; the
// loss weight is then 1 - (box area / image area), the share of pixels kept (mixing.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../mixup/mixing.hpp"

namespace {

class Cutmix : public wick::mixing::Mixing {
 public:
  explicit Cutmix(const wick::Params& p) : Mixing(p, "cutmix", 0x637574ull) {}

 protected:
  double mix(at::Tensor& input, const at::Tensor& perm, double lam, at::Generator& g) override {
    if (input.dim() != 4) {
      std::string shape;
      for (auto s : input.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(s);
      throw std::runtime_error(
          "cutmix needs image batches [N, C, H, W]; this task's training inputs are [" + shape +
          "] (use mixup for inputs that are not images)");
    }
    const auto h = input.size(2), w = input.size(3);
    const double cut = std::sqrt(1 - lam);
    const auto ch = static_cast<std::int64_t>(static_cast<double>(h) * cut);
    const auto cw = static_cast<std::int64_t>(static_cast<double>(w) * cut);
    const auto cy = torch::randint(h, {1}, g).item<std::int64_t>();
    const auto cx = torch::randint(w, {1}, g).item<std::int64_t>();
    const auto y1 = std::clamp<std::int64_t>(cy - ch / 2, 0, h);
    const auto y2 = std::clamp<std::int64_t>(cy + ch / 2, 0, h);
    const auto x1 = std::clamp<std::int64_t>(cx - cw / 2, 0, w);
    const auto x2 = std::clamp<std::int64_t>(cx + cw / 2, 0, w);
    if (y2 > y1 && x2 > x1) {
      using torch::indexing::Slice;
      // A copy: the batch may share memory with the data set.
      input = input.clone();
      const std::vector<torch::indexing::TensorIndex> idx{Slice(), Slice(), Slice(y1, y2),
                                                          Slice(x1, x2)};
      input.index_put_(idx, input.index_select(0, perm).index(idx));
    }
    return 1 - static_cast<double>((y2 - y1) * (x2 - x1)) / static_cast<double>(h * w);
  }
};

}  // namespace

WICK_PLUGIN(Cutmix, wick::PluginDef("cutmix", "1.0.0",
                                    "CutMix: paste a box of another image of the batch, mix "
                                    "the losses by area")
                        .order(-8)
                        .param_float("alpha", 1.0,
                                     "the box's area share is 1 - lam, lam ~ Beta(alpha, alpha)"))
