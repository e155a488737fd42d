// Fashion-MNIST (Zalando's 28x28 greyscale clothing images, 10 classes) from Debian's
// dataset-fashion-mnist package. The four gzipped IDX files are read once into memory as
// tensors; batches are cut from them by index (wick::TensorDataset).
#include <wick/plugin.hpp>
#include <wick/task.hpp>

#include <cstdint>
#include <filesystem>

#include "idx.hpp"

namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kSide = 28, kClasses = 10;
// Mean and standard deviation of the training images' pixels scaled to [0, 1].
constexpr double kMean = 0.2860, kStd = 0.3530;
constexpr const char* kInstallHint =
    "; the data set comes from Debian: sudo apt-get install dataset-fashion-mnist "
    "(or point [task] data_dir at a folder holding the four *-ubyte.gz files)";
constexpr const char* kDamagedHint =
    "; the file is damaged or unreadable: reinstall dataset-fashion-mnist (sudo apt-get install "
    "--reinstall dataset-fashion-mnist), or point [task] data_dir at a good copy";

std::vector<std::uint8_t> read_part(const fs::path& file, int rank, std::vector<std::int64_t>& dims,
                                    const std::vector<std::int64_t>& expect = {}) {
  try {
    auto d = wick::idx::read_idx(file.string(), rank, expect);
    dims = d.dims;
    return std::move(d.bytes);
  } catch (const wick::idx::IdxError& e) {
    throw std::runtime_error(std::string(e.what()) + (e.kind == wick::idx::IdxError::Kind::missing
                                                          ? kInstallHint
                                                          : kDamagedHint));
  }
}

// One split: images as float [N, 1, 28, 28] (scaled, optionally normalised), labels int64 [N].
std::shared_ptr<wick::TensorDataset> load_split(const fs::path& dir, const std::string& prefix,
                                                std::int64_t limit, bool normalize) {
  const fs::path img_file = dir / (prefix + "-images-idx3-ubyte.gz");
  const fs::path lbl_file = dir / (prefix + "-labels-idx1-ubyte.gz");
  std::vector<std::int64_t> idims, ldims;
  // The labels first (a byte a sample): the images' header must then claim as many 28 x 28
  // images, checked before any of them is decompressed.
  auto labels = read_part(lbl_file, 1, ldims);
  auto images = read_part(img_file, 3, idims, {ldims[0], kSide, kSide});
  for (auto l : labels)
    if (l >= kClasses)
      throw std::runtime_error(lbl_file.string() + ": label " + std::to_string(l) +
                               " out of range 0..9" + kInstallHint);
  std::int64_t n = idims[0];
  if (limit > 0 && limit < n) n = limit;

  auto x = torch::from_blob(images.data(), {n, 1, kSide, kSide}, torch::kUInt8)
               .to(torch::kFloat)
               .div_(255.0);
  if (normalize) x.sub_(kMean).div_(kStd);
  auto y = torch::from_blob(labels.data(), {n}, torch::kUInt8).to(torch::kLong);
  return std::make_shared<wick::TensorDataset>(std::move(x), std::move(y));
}

class FashionMnist : public wick::ClassificationTask {
 public:
  explicit FashionMnist(const wick::Params& p)
      : model_name_(p.get_string("model")),
        hidden_(p.get_int_list("hidden")),
        channels_(p.get_int_list("channels")),
        batch_norm_(p.get_bool("batch_norm")),
        dropout_(p.get_float("dropout")) {
    if (model_name_ != "mlp" && model_name_ != "cnn")
      throw p.error("model", "unknown model '" + model_name_ + "'; use \"mlp\" or \"cnn\"");
    for (auto h : hidden_)
      if (h < 1) throw p.error("hidden", "sizes must be >= 1");
    if (channels_.size() != 2 || channels_[0] < 1 || channels_[1] < 1)
      throw p.error("channels", "give two channel counts >= 1, e.g. [32, 64]");
    if (dropout_ < 0 || dropout_ >= 1) throw p.error("dropout", "must be in [0, 1)");
    const auto limit = p.get_int("limit");
    if (limit < 0) throw p.error("limit", "must be >= 0 (0: all samples)");
    const fs::path dir = p.get_path("data_dir");  // relative to the config file's folder
    const bool normalize = p.get_bool("normalize");
    train_ = load_split(dir, "train", limit, normalize);
    valid_ = load_split(dir, "t10k", limit, normalize);
  }

  std::shared_ptr<torch::nn::Module> model() override {
    namespace nn = torch::nn;
    net_ = nn::Sequential();
    std::int64_t in = kSide * kSide;
    if (model_name_ == "cnn") {
      // Two conv + pool blocks: 28x28 -> 14x14 -> 7x7.
      std::int64_t c = 1;
      for (auto out : channels_) {
        net_->push_back(nn::Conv2d(nn::Conv2dOptions(c, out, 3).padding(1).bias(!batch_norm_)));
        if (batch_norm_) net_->push_back(nn::BatchNorm2d(out));
        net_->push_back(nn::ReLU());
        net_->push_back(nn::MaxPool2d(2));
        c = out;
      }
      in = c * (kSide / 4) * (kSide / 4);
    }
    net_->push_back(nn::Flatten());
    for (auto h : hidden_) {
      net_->push_back(nn::Linear(in, h));
      net_->push_back(nn::ReLU());
      if (dropout_ > 0) net_->push_back(nn::Dropout(dropout_));
      in = h;
    }
    net_->push_back(nn::Linear(in, kClasses));
    return net_.ptr();
  }

  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return valid_; }

  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->forward(b.input);
  }

 private:
  std::string model_name_;
  std::vector<std::int64_t> hidden_, channels_;
  bool batch_norm_;
  double dropout_;
  std::shared_ptr<wick::TensorDataset> train_, valid_;
  torch::nn::Sequential net_{nullptr};
};

}  // namespace

WICK_PLUGIN(
    FashionMnist,
    wick::PluginDef("fashion_mnist", "1.0.0",
                    "Fashion-MNIST from Debian's dataset-fashion-mnist (MLP or CNN)")
        .param_string("data_dir", "/usr/share/datasets/fashion-mnist",
                      "folder with the four gzipped IDX files (relative: to the config file's)")
        .param_string("model", "mlp", "\"mlp\" or \"cnn\"")
        .param_int_list("hidden", {256, 128}, "hidden layer sizes of the classifier")
        .param_int_list("channels", {32, 64}, "cnn: channels of the two conv blocks")
        .param_bool("batch_norm", false, "cnn: batch norm after each convolution")
        .param_float("dropout", 0.0, "dropout after each hidden layer (0: none)")
        .param_bool("normalize", true,
                    "normalise pixels with the training set's mean 0.2860 and std 0.3530")
        .param_int("limit", 0, "use only the first N training and N test samples (0: all)"))
