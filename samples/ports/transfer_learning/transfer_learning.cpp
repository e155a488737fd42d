// Port of pytorch/examples cpp/transfer-learning: a frozen TorchScript feature extractor (the
// original's convert.py: ResNet-18 without its last layer) and a trained Linear head, on images
// in one folder per class (binary PPM/PGM in place of the original's JPEG and OpenCV).
#include <wick/jit.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "common/pnm.hpp"

namespace {

namespace fs = std::filesystem;

struct Net : torch::nn::Module {
  wick::JitModule features{nullptr};
  torch::nn::Linear head{nullptr};  // the extractor, frozen, stays in eval mode
};

// root/CLASS/*.ppm|pgm with label k for classes[k], read once into memory (as the original).
std::shared_ptr<wick::Dataset> load(const fs::path& root, const std::vector<std::string>& classes,
                                    std::int64_t side) {
  std::vector<torch::Tensor> images, labels;
  for (std::size_t k = 0; k < classes.size(); ++k) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(root / classes[k]))
      if (e.path().extension() == ".ppm" || e.path().extension() == ".pgm")
        files.push_back(e.path());
    std::sort(files.begin(), files.end());  // the same order on every machine
    for (const auto& f : files) images.push_back(ports::read_pnm(f.string(), side));
    labels.push_back(torch::full({static_cast<std::int64_t>(files.size())},
                                 static_cast<std::int64_t>(k), torch::kLong));
  }
  if (images.empty()) throw std::runtime_error("no .ppm or .pgm images under " + root.string());
  return std::make_shared<wick::TensorDataset>(torch::stack(images), torch::cat(labels));
}

class TransferLearning : public wick::ClassificationTask {
 public:
  explicit TransferLearning(const wick::Params& p)
      : features_(p.get_path("features")),
        classes_(p.get_string_list("classes")),
        in_features_(p.get_int("in_features")) {
    if (classes_.size() < 2) throw p.error("classes", "give at least two class folders");
    const auto side = p.get_int("image_size");
    train_ = load(p.get_path("root"), classes_, side);
    if (!p.get_string("valid_root").empty())
      valid_ = load(p.get_path("valid_root"), classes_, side);
  }

  std::shared_ptr<torch::nn::Module> model() override {
    net_ = std::make_shared<Net>();
    net_->features = net_->register_module(
        "features", wick::JitModule(wick::JitModuleImpl::load(features_), wick::JitMode::frozen));
    net_->head = net_->register_module(
        "head", torch::nn::Linear(in_features_, static_cast<std::int64_t>(classes_.size())));
    return net_;
  }
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return valid_; }

  // uint8 images, normalised as the ImageNet-trained extractor expects.
  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    const auto opts = b.input.options().dtype(torch::kFloat);
    const auto mean = torch::tensor({0.485, 0.456, 0.406}, opts).view({3, 1, 1});
    const auto stdev = torch::tensor({0.229, 0.224, 0.225}, opts).view({3, 1, 1});
    auto x = net_->features->forward((b.input.to(torch::kFloat) / 255 - mean) / stdev);
    return net_->head->forward(x.flatten(1));
  }

 private:
  std::string features_;
  std::vector<std::string> classes_;
  std::int64_t in_features_;
  std::shared_ptr<wick::Dataset> train_, valid_;
  std::shared_ptr<Net> net_;
};

}  // namespace

WICK_PLUGIN(TransferLearning,
            wick::PluginDef("transfer_learning", "1.0.0",
                            "Port of pytorch/examples cpp/transfer-learning")
                .param_required("features", wick::ParamType::string,
                                "TorchScript feature extractor (.pt), e.g. convert.py's output")
                .param_int("in_features", 512, "size of the extractor's output (ResNet-18: 512)")
                .param_required("root", wick::ParamType::string, "training images: root/CLASS/*")
                .param_string("valid_root", "", "validation images, same layout (\"\": none)")
                .param_string_list("classes", {"cat", "dog"}, "class folders; label = position")
                .param_int("image_size", 224, "images are resized to this side"))
