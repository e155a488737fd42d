// A DCGAN on Fashion-MNIST: two models (generator, discriminator), two optimizers
// ([optimizers.generator], [optimizers.discriminator]), manual optimization through the
// Context so that every stage chain (accumulation, loss scaling, clipping) applies per
// optimizer, both losses logged, a PNG grid of generated images every N steps, exact resume.
#include <cstdint>
#include <filesystem>
#include <wick/plugin.hpp>
#include <wick/task.hpp>

#include "idx.hpp"
#include "png.hpp"

namespace {

namespace nn = torch::nn;
namespace fs = std::filesystem;

// 28x28 images from a latent vector: 7x7 -> 14x14 -> 28x28, values in [-1, 1].
nn::Sequential generator(std::int64_t latent, std::int64_t f) {
  return nn::Sequential(
      nn::ConvTranspose2d(nn::ConvTranspose2dOptions(latent, f * 4, 7).bias(false)),
      nn::BatchNorm2d(f * 4), nn::ReLU(),
      nn::ConvTranspose2d(
          nn::ConvTranspose2dOptions(f * 4, f * 2, 4).stride(2).padding(1).bias(false)),
      nn::BatchNorm2d(f * 2), nn::ReLU(),
      nn::ConvTranspose2d(nn::ConvTranspose2dOptions(f * 2, 1, 4).stride(2).padding(1)),
      nn::Tanh());
}

// A logit per image: real (high) or generated (low).
nn::Sequential discriminator(std::int64_t f) {
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(1, f * 2, 4).stride(2).padding(1)),
      nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
      nn::Conv2d(nn::Conv2dOptions(f * 2, f * 4, 4).stride(2).padding(1).bias(false)),
      nn::BatchNorm2d(f * 4), nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
      nn::Conv2d(nn::Conv2dOptions(f * 4, 1, 7)), nn::Flatten());
}

struct Gan : nn::Module {
  Gan(std::int64_t latent, std::int64_t f) {
    generator = register_module("generator", ::generator(latent, f));
    discriminator = register_module("discriminator", ::discriminator(f));
  }
  nn::Sequential generator{nullptr}, discriminator{nullptr};
};

class GanTask : public wick::Task {
 public:
  explicit GanTask(const wick::Params& p)
      : latent_(p.get_int("latent")),
        features_(p.get_int("features")),
        sample_every_(p.get_int("sample_every")) {
    if (latent_ < 1) throw p.error("latent", "must be >= 1");
    if (features_ < 1) throw p.error("features", "must be >= 1");
    if (sample_every_ < 0) throw p.error("sample_every", "must be >= 0 (0: never)");
    const auto limit = p.get_int("limit");
    if (limit < 0) throw p.error("limit", "must be >= 0 (0: all images)");
    auto d = wick::idx::read_idx(
        (fs::path(p.get_path("data_dir")) / "train-images-idx3-ubyte.gz").string(), 3);
    std::int64_t n = d.dims[0];
    if (limit > 0 && limit < n) n = limit;
    auto images = torch::from_blob(d.bytes.data(), {n, 1, d.dims[1], d.dims[2]}, torch::kUInt8)
                      .to(torch::kFloat)
                      .div_(127.5)
                      .sub_(1.0);
    data_ = std::make_shared<wick::TensorDataset>(images, torch::zeros({n}, torch::kLong));
    // The task is built after the run's seed is set: the same noise in every run.
    fixed_noise_ = torch::randn({64, latent_, 1, 1});
  }

  std::shared_ptr<nn::Module> model() override {
    net_ = std::make_shared<Gan>(latent_, features_);
    return net_;
  }
  std::shared_ptr<wick::Dataset> train_data() override { return data_; }
  wick::OptimizerDefaults default_optimizer() const override { return {"adam", 2e-4}; }

  bool manual_optimization() const override { return true; }
  wick::Output train_step(wick::Context& ctx, const wick::Batch& b) override {
    const auto n = b.input.size(0);
    const auto real = torch::ones({n, 1}, b.input.options()), fake = torch::zeros_like(real);
    auto images = net_->generator->forward(noise(n, b.input.device()));
    // The discriminator: real images towards 1, generated ones (detached) towards 0.
    auto d_loss = bce(net_->discriminator->forward(b.input), real) +
                  bce(net_->discriminator->forward(images.detach()), fake);
    ctx.backward(d_loss, "discriminator");
    ctx.step("discriminator");
    // The generator: make the discriminator say 1. Its backward reaches the discriminator's
    // weights too; those gradients are dropped before the discriminator's next step.
    auto g_loss = bce(net_->discriminator->forward(images), real);
    ctx.backward(g_loss, "generator");
    ctx.step("generator");
    ctx.zero_grad("discriminator");
    if (sample_every_ > 0 && (ctx.state().micro_step + 1) % sample_every_ == 0 &&
        ctx.run().is_main_process())
      save_samples(ctx);
    wick::Output o;
    o.pred = images.detach();
    o.loss = (d_loss + g_loss).detach();
    o.metrics = {{"d_loss", d_loss.detach()}, {"g_loss", g_loss.detach()}};
    return o;
  }

  // Used only when a run has validation data: images from noise, scored as the generator.
  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->generator->forward(noise(b.input.size(0), b.input.device()));
  }
  wick::Output loss(wick::Context&, const at::Tensor& pred, const wick::Batch&) override {
    auto logits = net_->discriminator->forward(pred);
    return {pred, bce(logits, torch::ones_like(logits)), {}};
  }

 private:
  at::Tensor noise(std::int64_t n, const torch::Device& device) const {
    return torch::randn({n, latent_, 1, 1}, torch::TensorOptions().device(device));
  }
  static at::Tensor bce(const at::Tensor& logits, const at::Tensor& target) {
    return torch::binary_cross_entropy_with_logits(logits, target);
  }

  // An 8 x 8 grid of the generator's images for the fixed noise, as samples/step-NNNNNN.png.
  void save_samples(wick::Context& ctx) {
    torch::NoGradGuard no_grad;
    net_->generator->eval();
    auto img = net_->generator->forward(fixed_noise_.to(ctx.batch().input.device())).cpu();
    net_->generator->train();
    const std::int64_t side = img.size(2), rows = 8, cols = img.size(0) / rows;
    auto grid = img.add(1)
                    .mul(127.5)
                    .clamp(0, 255)
                    .to(torch::kUInt8)
                    .view({rows, cols, side, side})
                    .permute({0, 2, 1, 3})
                    .reshape({rows * side, cols * side})
                    .contiguous();
    const auto dir = fs::path(ctx.run().output_dir) / "samples";
    fs::create_directories(dir);
    char name[32];
    std::snprintf(name, sizeof name, "step-%06lld.png",
                  static_cast<long long>(ctx.state().micro_step + 1));
    std::vector<std::uint8_t> pixels(grid.data_ptr<std::uint8_t>(),
                                     grid.data_ptr<std::uint8_t>() + grid.numel());
    wick::sample::write_png((dir / name).string(), pixels, static_cast<int>(cols * side),
                            static_cast<int>(rows * side), 1);
  }

  std::int64_t latent_, features_, sample_every_;
  std::shared_ptr<wick::TensorDataset> data_;
  at::Tensor fixed_noise_;
  std::shared_ptr<Gan> net_;
};

}  // namespace

WICK_PLUGIN(GanTask,
            wick::PluginDef("gan", "1.0.0",
                            "DCGAN on Fashion-MNIST: generator and discriminator, two optimizers")
                .param_string("data_dir", "/usr/share/datasets/fashion-mnist",
                              "folder with train-images-idx3-ubyte.gz")
                .param_int("limit", 0, "use only the first N images (0: all 60,000)")
                .param_int("latent", 64, "size of the generator's noise vector")
                .param_int("features", 32, "base channel count of both networks")
                .param_int("sample_every", 200,
                           "write samples/step-N.png (8 x 8 generated images) every N batches "
                           "(0: never)"))
