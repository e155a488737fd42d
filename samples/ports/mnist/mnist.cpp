// Port of pytorch/examples cpp/mnist: the same Net, data, loss and optimizer; the loop,
// logging, device choice and evaluation are wick's.
#include <wick/plugin.hpp>
#include <wick/task.hpp>
#include <wick/torch_data.hpp>

namespace {

struct Net : torch::nn::Module {
  Net()
      : conv1(torch::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)),
        conv2(torch::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)),
        fc1(320, 50),
        fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*training=*/is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, /*dim=*/1);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};

class Mnist : public wick::Task {
 public:
  explicit Mnist(const wick::Params& p) : root_(p.get_path("root")) {}

  std::shared_ptr<torch::nn::Module> model() override { return net_ = std::make_shared<Net>(); }
  std::shared_ptr<wick::Dataset> train_data() override { return data(MNIST::Mode::kTrain); }
  std::shared_ptr<wick::Dataset> valid_data() override { return data(MNIST::Mode::kTest); }

  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->forward(b.input);
  }
  wick::Output loss(wick::Context&, const at::Tensor& pred, const wick::Batch& b) override {
    auto accuracy = pred.argmax(1).eq(b.target).to(torch::kFloat).mean();
    return {pred, torch::nll_loss(pred, b.target), {{"accuracy", accuracy}}};
  }
  wick::OptimizerDefaults default_optimizer() const override { return {"sgd", 0.01}; }

 private:
  using MNIST = torch::data::datasets::MNIST;
  std::shared_ptr<wick::Dataset> data(MNIST::Mode mode) const {
    namespace T = torch::data::transforms;
    return wick::from_torch_dataset(
        MNIST(root_, mode).map(T::Normalize<>(0.1307, 0.3081)).map(T::Stack<>()));
  }

  std::string root_;
  std::shared_ptr<Net> net_;
};

}  // namespace

WICK_PLUGIN(Mnist, wick::PluginDef("mnist", "1.0.0", "Port of pytorch/examples cpp/mnist")
                       .param_string("root", "data/mnist",
                                     "folder with the four uncompressed IDX files "
                                     "(train-images-idx3-ubyte, ...), relative to the config"))
