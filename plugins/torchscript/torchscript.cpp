// Train a TorchScript module from TOML alone: the model is a file made in Python
// (torch.jit.script or trace, then .save), the data are files (.pt of torch.save, .npz, a
// folder of .npy files, .csv), the loss a name or the module's own loss method. The module's
// parameters and buffers are the model's (wick::JitModule): trained, checkpointed, resumed
// and fingerprinted as any model's.
#include <wick/jit.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>
#include <wick/tensor_files.hpp>

#include <cstdint>
#include <sstream>

namespace {

namespace F = torch::nn::functional;

const std::vector<std::string> kLosses = {"cross_entropy",   "mse", "l1",    "smooth_l1",
                                          "bce_with_logits", "nll", "module"};

std::string shape_of(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " " << c10::toString(t.scalar_type());
  return s.str();
}

// TorchScript's message: the error itself (the interpreter puts it last, after the
// tracebacks), then where it happened in the Python source; no C++ stack.
std::string script_error(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string what = c10 ? c10->what_without_backtrace() : e.what();
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  const auto last = what.rfind('\n');
  if (last == std::string::npos) return what;
  std::string out = what.substr(last + 1);
  const auto original = what.find("Traceback of TorchScript, original code");
  if (original != std::string::npos) out += "\n" + what.substr(original, last - original);
  return out;
}

bool class_loss(const std::string& loss) {
  return loss == "cross_entropy" || loss == "nll";
}

class TorchScriptTask : public wick::Task {
 public:
  explicit TorchScriptTask(const wick::Params& p)
      : model_path_(p.get_path("model")), loss_(p.get_string("loss")) {
    try {
      jit_ = wick::JitModule(wick::JitModuleImpl::load(model_path_), wick::JitMode::trainable);
    } catch (const std::exception& e) {
      const std::string why = script_error(e);
      throw wick::ConfigError("task.model '" + model_path_ +
                              "' is not a TorchScript file (torch.jit.script(model).save(...) "
                              "or torch.jit.trace): " +
                              why.substr(0, why.find('\n')));
    }
    if (loss_ == "module" && !jit_->jit().find_method("loss"))
      throw p.error("loss", "is \"module\" but the module in '" + model_path_ +
                                "' has no loss(prediction, target) method; add one marked "
                                "@torch.jit.export, or name a loss such as \"cross_entropy\"");
    const auto in_key = p.get_string("input_key"), target_key = p.get_string("target_key");
    train_ = load_data(p.get_path("train"), in_key, target_key);
    probe(*train_, p.get_path("train"));
    if (!p.get_string("valid").empty()) {
      valid_ = load_data(p.get_path("valid"), in_key, target_key);
      probe(*valid_, p.get_path("valid"));  // its labels too: validation would fail on them
    }
  }

  std::shared_ptr<torch::nn::Module> model() override { return jit_.ptr(); }
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  std::shared_ptr<wick::Dataset> valid_data() override { return valid_; }

  at::Tensor forward(wick::Context&, const wick::Batch& b) override { return run(b.input); }

  wick::Output loss(wick::Context& ctx, const at::Tensor& pred, const wick::Batch& b) override {
    wick::Output o;
    const auto& t = b.target;
    if (loss_ == "cross_entropy") {
      return wick::classification_loss(pred, t, ctx.state().validating());
    } else if (loss_ == "nll") {
      o.loss = F::nll_loss(pred, t);
    } else if (loss_ == "module") {
      o.loss = jit_->jit().get_method("loss")({pred, t}).toTensor();
    } else {
      // Elementwise losses: a [N, 1] prediction for a [N] target is one value per sample.
      const auto x = pred.numel() == t.numel() ? pred.reshape(t.sizes()) : pred;
      if (loss_ == "mse") o.loss = F::mse_loss(x, t);
      if (loss_ == "l1") o.loss = F::l1_loss(x, t);
      if (loss_ == "smooth_l1") o.loss = F::smooth_l1_loss(x, t);
      if (loss_ == "bce_with_logits") o.loss = F::binary_cross_entropy_with_logits(x, t);
    }
    return o;
  }

 private:
  // The model's output for x, with TorchScript's own message, the input and the file when
  // the scripted forward fails.
  at::Tensor run(const at::Tensor& x) {
    try {
      return jit_->forward(x);
    } catch (const std::exception& e) {
      throw std::runtime_error("the TorchScript model '" + model_path_ +
                               "' failed on an input of " + shape_of(x) + ": " + script_error(e));
    }
  }

  std::shared_ptr<wick::TensorDataset> load_data(const std::string& path, const std::string& in_key,
                                                 const std::string& target_key) {
    auto d = wick::read_data_file(path, in_key, target_key);
    if (d.input.dim() == 0 || d.input.size(0) == 0)
      throw wick::ConfigError(path + ": it holds no samples");
    // Floating inputs in the model's dtype (a float64 NumPy array for a float32 model).
    at::ScalarType dtype = at::kFloat;
    for (const auto& t : jit_->parameters()) {
      dtype = t.scalar_type();
      break;
    }
    if (at::isFloatingType(d.input.scalar_type()) && d.input.scalar_type() != dtype)
      d.input = d.input.to(dtype);
    if (class_loss(loss_)) {
      if (at::isFloatingType(d.target.scalar_type())) {
        if (!d.target.eq(d.target.round()).all().item<bool>())
          throw wick::ConfigError(path + ": task.loss \"" + loss_ +
                                  "\" needs class indices, but the target holds fractional "
                                  "values; save integer labels, or pick a regression loss");
      }
      d.target = d.target.to(at::kLong);
      // A column of labels [N, 1] is one class index per sample.
      if (d.target.dim() == 2 && d.target.size(1) == 1) d.target = d.target.squeeze(1);
      if (d.target.dim() != 1)
        throw wick::ConfigError(path + ": task.loss \"" + loss_ +
                                "\" needs one class index per sample, a target [N], but it "
                                "holds " +
                                shape_of(d.target));
    } else if (loss_ != "module") {
      d.target = d.target.to(dtype);  // regression and binary targets in the model's dtype
    }
    return std::make_shared<wick::TensorDataset>(d.input, d.target);
  }

  // Runs the model on two training samples at build time, so that `wick check` finds a model
  // that does not fit its data or its loss (exit 2) before any training.
  void probe(wick::TensorDataset& ds, const std::string& path) {
    const auto n = std::min<std::int64_t>(2, ds.size());
    const auto x = ds.input().slice(0, 0, n).clone(), t = ds.target();
    torch::NoGradGuard ng;
    jit_->eval();
    at::Tensor pred;
    try {
      pred = run(x);
    } catch (const std::runtime_error& e) {
      jit_->train();
      throw wick::ConfigError(std::string(e.what()) + "\n(the first samples of " + path +
                              "; is input_key the model's input?)");
    }
    jit_->train();
    if (loss_ == "module") {
      try {
        (void)jit_->jit().get_method("loss")({pred, t.slice(0, 0, n)});
      } catch (const std::exception& e) {
        throw wick::ConfigError("the loss(prediction, target) method of '" + model_path_ +
                                "' failed on a prediction of " + shape_of(pred) +
                                " and a target of " + shape_of(t.slice(0, 0, n)) + ": " +
                                script_error(e));
      }
    }
    const auto first = t.slice(0, 0, n);
    if (!class_loss(loss_) && loss_ != "module" && pred.numel() != first.numel())
      throw wick::ConfigError("task.loss \"" + loss_ +
                              "\" compares the prediction with the target value by value, but "
                              "the model gives " +
                              shape_of(pred) + " for targets of " + shape_of(first) + " in " +
                              path + "; make the model give one value per target value");
    if (class_loss(loss_)) {
      if (pred.dim() != 2)
        throw wick::ConfigError("task.loss \"" + loss_ +
                                "\" needs class scores [N, C] from the "
                                "model, which gives " +
                                shape_of(pred) + " for " + path);
      const auto lo = t.min().item<std::int64_t>(), hi = t.max().item<std::int64_t>();
      if (lo < 0 || hi >= pred.size(1))
        throw wick::ConfigError(path + ": labels out of range for " + loss_ +
                                ": the target holds " + std::to_string(lo) + " .. " +
                                std::to_string(hi) + " but the model scores " +
                                std::to_string(pred.size(1)) + " classes (0 .. " +
                                std::to_string(pred.size(1) - 1) + ")");
    }
  }

  std::string model_path_, loss_;
  wick::JitModule jit_{nullptr};
  std::shared_ptr<wick::TensorDataset> train_, valid_;
};

}  // namespace

WICK_PLUGIN(
    TorchScriptTask,
    wick::PluginDef("torchscript", "1.0.0",
                    "A TorchScript model (made in Python: torch.jit.script or trace, saved) "
                    "trained on data files (.pt, .npz, a folder of .npy, .csv)")
        .param_required("model", wick::ParamType::string,
                        "the TorchScript file, relative to the config file")
        .param_required("train", wick::ParamType::string,
                        "training data: .pt (torch.save of a dict or tuple of tensors), .npz, "
                        "a folder of KEY.npy files (memory-mapped), or .csv with a header row")
        .param_string("valid", "", "validation data, as train (\"\": none)")
        .param_choice("loss", kLosses, "cross_entropy",
                      "the loss of (prediction, target); \"module\": the module's own "
                      "loss(prediction, target) method")
        .param_string("input_key", "input", "the input's key (a .pt dict, .npz, .npy folder)")
        .param_string("target_key", "target", "the target's key, or the target's .csv column"))
