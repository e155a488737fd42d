// Test plugin that must not build: its loss() takes the prediction by value, so it overrides
// nothing and the class stays abstract. WICK_PLUGIN must say so (not ask for a constructor the
// class has). Built by the test sdk_abstract_task_named_abstract (tests/sdk.cmake), never with
// the tree.
#include <wick/task.hpp>
#include <wick/wick.hpp>

namespace {
class Forgetful : public wick::Task {
 public:
  explicit Forgetful(const wick::Params&) {}
  std::shared_ptr<torch::nn::Module> model() override { return nullptr; }
  std::shared_ptr<wick::Dataset> train_data() override { return nullptr; }
  at::Tensor forward(wick::Context&, const wick::Batch& b) override { return b.input; }
  wick::Output loss(wick::Context&, at::Tensor, const wick::Batch&) { return {}; }
};
}  // namespace

WICK_PLUGIN(Forgetful, wick::PluginDef("forgetful", "1.0.0", "Test: an abstract task"))
