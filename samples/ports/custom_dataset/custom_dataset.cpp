// Port of pytorch/examples cpp/custom-dataset without OpenCV: a per-sample torch::data
// dataset of image files (binary PGM/PPM) listed with labels in a text file, decoded and
// resized in get(), on trainer.num_workers loader threads; the original's AlexNet-style net.
#include <wick/plugin.hpp>
#include <wick/task.hpp>
#include <wick/torch_data.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/pnm.hpp"

namespace {

struct ImageList : torch::data::datasets::Dataset<ImageList> {
  std::vector<std::pair<std::string, std::int64_t>> items;  // file, label
  std::int64_t side = 224;
  torch::data::Example<> get(std::size_t i) override {
    auto image = ports::read_pnm(items[i].first, side).to(torch::kFloat).div_(255);
    return {image, torch::tensor(items[i].second)};
  }
  torch::optional<std::size_t> size() const override { return items.size(); }
};

torch::nn::Sequential network(std::int64_t classes) {
  using namespace torch::nn;
  auto pool = [] { return MaxPool2d(MaxPool2dOptions(3).stride(2)); };
  return Sequential(Conv2d(Conv2dOptions(3, 64, 11).stride(4).padding(2)), ReLU(), pool(),
                    Conv2d(Conv2dOptions(64, 192, 5).padding(2)), ReLU(), pool(),
                    Conv2d(Conv2dOptions(192, 384, 3).padding(1)), ReLU(),
                    Conv2d(Conv2dOptions(384, 256, 3).padding(1)), ReLU(),
                    Conv2d(Conv2dOptions(256, 256, 3).padding(1)), ReLU(), pool(),
                    AdaptiveAvgPool2d(6),  // 6x6 already at 224; lets image_size vary
                    Flatten(), Dropout(), Linear(256 * 6 * 6, 4096), ReLU(), Dropout(),
                    Linear(4096, 4096), ReLU(), Linear(4096, classes), LogSoftmax(1));
}

class CustomDataset : public wick::Task {
 public:
  explicit CustomDataset(const wick::Params& p) : classes_(p.get_int("classes")) {
    train_.side = test_.side = p.get_int("image_size");
    if (train_.side < 64) throw p.error("image_size", "must be >= 64");
    // Lines "FILE LABEL train|test", FILE relative to the list's folder (as info.txt).
    const std::filesystem::path list = p.get_path("list");
    std::ifstream in(list);
    if (!in) throw p.error("list", "cannot read " + list.string());
    std::int64_t n = 1, label = 0;
    for (std::string line, file, split; std::getline(in, line); ++n) {
      std::istringstream fields(line);
      if (!(fields >> file)) continue;  // a blank line
      if (!(fields >> label >> split) || label < 0 || label >= classes_ ||
          (split != "train" && split != "test"))
        throw std::runtime_error(list.string() + ":" + std::to_string(n) +
                                 ": expected FILE LABEL train|test, 0 <= LABEL < classes");
      (split == "train" ? train_ : test_)
          .items.emplace_back((list.parent_path() / file).string(), label);
    }
  }

  std::shared_ptr<torch::nn::Module> model() override { return (net_ = network(classes_)).ptr(); }
  std::shared_ptr<wick::Dataset> train_data() override { return wick::from_torch_dataset(train_); }
  std::shared_ptr<wick::Dataset> valid_data() override {
    return test_.items.empty() ? nullptr : wick::from_torch_dataset(test_);
  }

  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->forward(b.input);
  }
  wick::Output loss(wick::Context&, const at::Tensor& pred, const wick::Batch& b) override {
    auto accuracy = pred.argmax(1).eq(b.target).to(torch::kFloat).mean();
    return {pred, torch::nll_loss(pred, b.target), {{"accuracy", accuracy}}};
  }

 private:
  std::int64_t classes_;
  ImageList train_, test_;
  torch::nn::Sequential net_{nullptr};
};

}  // namespace

WICK_PLUGIN(
    CustomDataset,
    wick::PluginDef("custom_dataset", "1.0.0", "Port of pytorch/examples cpp/custom-dataset")
        .param_required("list", wick::ParamType::string,
                        "text file of lines 'FILE LABEL train|test' (relative to the config)")
        .param_int("image_size", 224, "images are resized to this side")
        .param_int("classes", 102, "number of labels"))
