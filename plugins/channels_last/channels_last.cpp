// Channels-last memory format: the model's 4-D weights (convolutions) and every 4-D input
// batch are laid out N, H, W, C in memory, so oneDNN (CPU) and cuDNN (GPU) run their
// convolutions without reordering each tensor first. Values and shapes do not change, only
// strides. Optimizer state made from the weights (Adam's moments) follows their layout.
#include <cstdint>
#include <cstdio>

#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace {

class ChannelsLast : public wick::Hook {
 public:
  explicit ChannelsLast(const wick::Params&) {}

  void connect(wick::Registrar& r) override {
    // After a checkpoint restore (order -100): loading copies values into the weights and
    // keeps whatever layout they have, so converting here holds for fresh and resumed runs.
    r.on(wick::Point::before_fit, [this](wick::Context& c) { convert_model(c); });
    r.stage(wick::Stage::forward, [](wick::Context& c, wick::Next next) {
      auto& x = c.batch().input;
      if (x.defined() && x.dim() == 4) x = to_channels_last(x);
      return next();
    });
  }

 private:
  // Restrided by what kernels choose their layout by (suggest_memory_format), not by
  // is_contiguous: with one channel ([N, 1, H, W]: a grey image, a first convolution's
  // weight) a plain contiguous tensor also counts as channels-last contiguous, yet its strides
  // make the convolution run NCHW, and every layer after it follows.
  static at::Tensor to_channels_last(const at::Tensor& t) {
    if (t.suggest_memory_format() == at::MemoryFormat::ChannelsLast) return t;
    return t.to(t.options(), /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::ChannelsLast);
  }

  void convert_model(wick::Context& c) {
    torch::NoGradGuard no_grad;
    std::int64_t converted = 0;
    auto convert = [&](at::Tensor& t) {
      if (!t.defined() || t.dim() != 4) return;
      // set_data keeps the tensor object, so the optimizer's references stay valid.
      t.set_data(to_channels_last(t));
      ++converted;
    };
    for (auto& p : c.model().parameters()) convert(p);
    for (auto& b : c.model().buffers()) convert(b);
    if (!announced_ && c.run().is_main_process()) {
      if (converted == 0)
        std::fprintf(stderr,
                     "channels_last: the model has no 4-D weights (no 2-D convolutions); "
                     "only 4-D inputs are converted\n");
      announced_ = true;
    }
  }

  bool announced_ = false;
};

}  // namespace

WICK_PLUGIN(ChannelsLast,
            wick::PluginDef("channels_last", "1.0.0",
                            "Channels-last memory format for 4-D weights and inputs (faster "
                            "convolutions on oneDNN and cuDNN)")
                .order(-6))
