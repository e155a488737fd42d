// Layer freezing: parameters whose names match a pattern (fnmatch globs over the model's
// parameter names, e.g. "0.*" or "*.bias") get no gradient and are not updated while the
// epoch (0-based) is below until_epoch; for the whole run with until_epoch = -1. Frozen
// tensors have requires_grad off and no .grad, so backward skips them and the optimizers
// (which skip parameters without a gradient) leave them and their state alone. What is frozen
// follows from the epoch alone, so a resumed run freezes as the uninterrupted one did.
#include <fnmatch.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <wick/params.hpp>
#include <wick/plugin.hpp>
#include <wick/task.hpp>

namespace {

class Freeze : public wick::Hook {
 public:
  explicit Freeze(const wick::Params& p)
      : patterns_(p.get_string_list("patterns")),
        until_(p.get_int("until_epoch")),
        key_("hooks." + p.instance() + ".patterns") {
    if (patterns_.empty())
      throw p.error("patterns", "give at least one pattern, e.g. [\"0.*\"] or [\"*.bias\"]");
    if (until_ < -1) throw p.error("until_epoch", "must be >= 0, or -1 for the whole run");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) { match(c); });
    r.on(wick::Point::before_epoch, [this](wick::Context& c) { apply(c); });
  }

 private:
  void match(wick::Context& c) {
    if (c.collectives())
      throw wick::ConfigError(
          "freeze: not supported with ddp (frozen parameters get no gradient, which the "
          "all-reduce waits for); train on one process or remove freeze");
    matched_.clear();
    std::vector<bool> used(patterns_.size(), false);
    std::string names;
    std::size_t trainable = 0, trainable_matched = 0;
    for (const auto& item : c.model().named_parameters()) {
      if (names.size() < 300) names += (names.empty() ? "" : ", ") + item.key();
      trainable += item.value().requires_grad() ? 1 : 0;
      for (std::size_t k = 0; k < patterns_.size(); ++k)
        if (fnmatch(patterns_[k].c_str(), item.key().c_str(), 0) == 0) {
          used[k] = true;
          matched_.push_back(item.value());
          trainable_matched += item.value().requires_grad() ? 1 : 0;
          break;
        }
    }
    for (std::size_t k = 0; k < patterns_.size(); ++k)
      if (!used[k])
        throw wick::ConfigError(key_ + ": pattern '" + patterns_[k] +
                                "' matches no parameter of the model; its parameters are " + names +
                                (names.size() >= 300 ? ", ..." : ""));
    if (trainable > 0 && trainable_matched == trainable && until_ != 0)
      throw wick::ConfigError(
          key_ + " match every trainable parameter of the model (" + std::to_string(trainable) +
          "), so nothing would train" +
          (until_ < 0 ? std::string() : " until epoch " + std::to_string(until_)) +
          "; narrow the patterns to the part to keep fixed");
    frozen_ = -1;  // unknown: the first before_epoch decides
  }

  void apply(wick::Context& c) {
    const auto e = c.state().epoch;
    const int frozen = (until_ < 0 || e < until_) ? 1 : 0;
    if (frozen == frozen_) return;
    std::int64_t values = 0;
    for (auto& p : matched_) {
      p.requires_grad_(frozen == 0);
      if (frozen) p.mutable_grad() = at::Tensor();
      values += p.numel();
    }
    if (c.run().is_main_process()) {
      if (frozen)
        std::fprintf(stderr, "freeze: epoch %lld: %zu tensors (%lld values) frozen%s\n",
                     static_cast<long long>(e), matched_.size(), static_cast<long long>(values),
                     until_ < 0 ? "" : (" until epoch " + std::to_string(until_)).c_str());
      else if (frozen_ == 1)
        std::fprintf(stderr, "freeze: epoch %lld: %zu tensors trainable again\n",
                     static_cast<long long>(e), matched_.size());
    }
    frozen_ = frozen;
  }

  std::vector<std::string> patterns_;
  std::int64_t until_;
  std::string key_;  // hooks.INSTANCE.patterns, for errors
  std::vector<at::Tensor> matched_;
  int frozen_ = -1;
};

}  // namespace

WICK_PLUGIN(Freeze,
            wick::PluginDef("freeze", "1.0.0",
                            "Freeze parameters matching name patterns until an epoch")
                .order(-1)
                .param_required("patterns", wick::ParamType::string_list,
                                "fnmatch globs over parameter names, e.g. [\"0.*\", \"*.bias\"]")
                .param_int("until_epoch", -1,
                           "0-based epoch from which they train again (-1: frozen for the run)"))
