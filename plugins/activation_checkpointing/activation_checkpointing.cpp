// Activation checkpointing by module name: the submodules whose names match the globs keep no
// activations for backward and recompute them there (wick/checkpointed.hpp), trading one more
// forward of each for their activation memory. Which modules it can reach:
// - an element of a torch::nn::Sequential ("net.3", "blocks.*" when blocks is a Sequential):
//   the Sequential's forward calls the element through a checkpointing wrapper; the element
//   stays registered where it was, so parameter names, checkpoints and devices are unchanged;
// - a TorchScript part (wick::JitModule): its forward(x) runs as one segment. The submodules
//   inside a TorchScript graph cannot be reached one by one: the graph calls them itself.
// A module its parent calls from its own C++ forward cannot be rerouted from outside: the
// plugin refuses it, naming the parent; wick::checkpointed(module, x) in that forward does it.
// Globs are fnmatch patterns over the names of model.named_modules() ("*" also crosses dots);
// of a match and its descendants only the outermost is checkpointed. Recomputation restores
// the random generators, so dropout matches and a resumed run continues exactly.
#include <fnmatch.h>

#include <wick/checkpointed.hpp>
#include <wick/jit.hpp>
#include <wick/wick.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {

// Stands in for a Sequential's element in its forward chain; the element itself stays
// registered under its name.
struct CheckpointedElementImpl : torch::nn::Module {
  explicit CheckpointedElementImpl(torch::nn::AnyModule inner)
      : torch::nn::Module("wick::CheckpointedElement"), inner_(std::move(inner)) {}
  at::Tensor forward(at::Tensor x) {
    return wick::checkpointed([this](const at::Tensor& t) { return inner_.forward(t); }, x);
  }
  torch::nn::AnyModule inner_;
};

class ActivationCheckpointing : public wick::Hook {
 public:
  explicit ActivationCheckpointing(const wick::Params& p) : globs_(p.get_string_list("modules")) {
    if (globs_.empty())
      throw p.error("modules",
                    "give at least one glob over module names, e.g. [\"blocks.*\"] or [\"3\"]");
  }
  ~ActivationCheckpointing() override { restore(); }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) { wrap(c); });
    r.on(wick::Point::after_fit, [this](wick::Context&) { restore(); });
    r.on(wick::Point::after_cancel, [this](wick::Context& c) {
      if (c.cancellation()->ends_fit()) restore();
    });
  }

 private:
  bool matches(const std::string& name, std::vector<bool>& used) const {
    bool any = false;
    for (std::size_t k = 0; k < globs_.size(); ++k)
      if (fnmatch(globs_[k].c_str(), name.c_str(), 0) == 0) used[k] = any = true;
    return any;
  }

  void wrap(wick::Context& c) {
    restore();
    const auto modules = c.model().named_modules();  // preorder: parents before children
    std::vector<bool> used(globs_.size(), false);
    std::vector<std::string> taken;  // matched names: their descendants are inside them
    std::string names;
    for (const auto& item : modules) {
      const std::string& name = item.key();
      if (name.empty()) continue;  // the model itself: nothing calls it but the task
      if (names.size() < 300) names += (names.empty() ? "" : ", ") + name;
      if (!matches(name, used)) continue;
      bool inside = false;
      for (const auto& t : taken) inside = inside || name.rfind(t + ".", 0) == 0;
      if (inside) continue;
      taken.push_back(name);
      wrap_one(modules, name, item.value());
    }
    for (std::size_t k = 0; k < globs_.size(); ++k)
      if (!used[k])
        throw wick::ConfigError("activation_checkpointing: glob '" + globs_[k] +
                                "' matches no module of the model; its modules are " + names +
                                (names.size() >= 300 ? ", ..." : ""));
    if (c.state().is_main_process()) {
      std::string list;
      for (const auto& t : taken) list += (list.empty() ? "" : ", ") + t;
      std::fprintf(stderr, "activation_checkpointing: %zu segment(s) recomputed in backward: %s\n",
                   taken.size(), list.c_str());
    }
  }

  void wrap_one(const torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>>& all,
                const std::string& name, const std::shared_ptr<torch::nn::Module>& m) {
    if (auto part = std::dynamic_pointer_cast<wick::JitModuleImpl>(m)) {
      if (part->mode() == wick::JitMode::frozen)
        throw wick::ConfigError("activation_checkpointing: '" + name +
                                "' is a frozen TorchScript part: nothing in it is trained, so "
                                "its forward keeps no activations for backward already; remove "
                                "it from modules");
      part->set_checkpointed(true);
      parts_.push_back(std::move(part));
      return;
    }
    const auto dot = name.rfind('.');
    const std::string parent_name = dot == std::string::npos ? "" : name.substr(0, dot);
    const auto& parent = all[parent_name];
    if (parent->name() == "wick::JitModule::Part" || parent->name() == "wick::JitModule")
      throw wick::ConfigError(
          "activation_checkpointing: '" + name +
          "' is inside a TorchScript part, whose graph calls its submodules itself; checkpoint "
          "the whole part instead (its name in modules, e.g. the part's registered name)");
    auto seq = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(parent);
    if (!seq)
      throw wick::ConfigError(
          "activation_checkpointing: '" + name + "' is called by the forward of its parent '" +
          (parent_name.empty() ? std::string("(the model)") : parent_name) + "' (" +
          parent->name() +
          "), which wick cannot reroute from outside; only elements of a torch::nn::Sequential "
          "and TorchScript parts are checkpointed by name. Call wick::checkpointed(module, x) "
          "in that forward instead (wick/checkpointed.hpp)");
    for (auto it = seq->begin(); it != seq->end(); ++it)
      if (it->ptr().get() == m.get()) {
        auto original = *it;
        *it = torch::nn::AnyModule(std::make_shared<CheckpointedElementImpl>(original));
        elements_.push_back({seq, it - seq->begin(), std::move(original)});
        return;
      }
    throw std::logic_error("activation_checkpointing: '" + name +
                           "' is registered in its Sequential but not in its forward chain");
  }

  // Puts the model back as it was (after the fit: evaluate, predict and export see it plain).
  void restore() {
    for (auto& e : elements_) *(e.seq->begin() + e.index) = e.original;
    elements_.clear();
    for (auto& p : parts_) p->set_checkpointed(false);
    parts_.clear();
  }

  struct Element {
    std::shared_ptr<torch::nn::SequentialImpl> seq;
    std::ptrdiff_t index;
    torch::nn::AnyModule original;
  };
  std::vector<std::string> globs_;
  std::vector<Element> elements_;
  std::vector<std::shared_ptr<wick::JitModuleImpl>> parts_;
};

}  // namespace

WICK_PLUGIN(ActivationCheckpointing,
            wick::PluginDef("activation_checkpointing", "1.0.0",
                            "recompute the activations of chosen modules in backward instead of "
                            "keeping them (Sequential elements, TorchScript parts)")
                .param_required("modules", wick::ParamType::string_list,
                                "fnmatch globs over module names, e.g. [\"blocks.*\"]; "
                                "Sequential elements and TorchScript parts"))
