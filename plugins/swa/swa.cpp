// Stochastic weight averaging (Izmailov et al., 2018): from epoch `start_epoch` on, the
// weights at the end of each epoch's training are averaged with equal weight,
// avg <- avg + (w - avg) / (n + 1). At the end of the last epoch's training the average
// replaces the weights and batch-norm statistics are recomputed for it (one forward pass over
// the training data in training mode, with a cumulative mean per batch), so the final
// validation, the last checkpoint, summary.json's model and `wick export` all use the
// averaged model. Earlier validations see the weights as trained. Use lr_schedule for the
// constant or cyclic rate SWA is usually run with.
// Its order (-110) puts it ahead of the checkpoint hook at after_epoch, so the checkpoint
// written there holds this epoch's average.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <wick/params.hpp>
#include <wick/plugin.hpp>
#include <wick/state_dict.hpp>
#include <wick/task.hpp>

namespace {

class Swa : public wick::Hook {
 public:
  explicit Swa(const wick::Params& p)
      : start_(p.get_int("start_epoch")), bn_update_(p.get_bool("bn_update")) {
    if (start_ < -1) throw p.error("start_epoch", "must be >= 0, or -1 for the last quarter");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) {
      in_fit_ = true;
      const auto epochs = c.run().epochs;
      first_ = start_ >= 0 ? start_ : epochs - std::max<std::int64_t>(1, epochs / 4);
      if (first_ >= epochs)
        throw wick::ConfigError("swa: start_epoch = " + std::to_string(first_) +
                                " but the run has " + std::to_string(epochs) +
                                " epochs (0-based), so nothing would be averaged; set "
                                "start_epoch below " +
                                std::to_string(epochs));
    });
    // Training of the epoch is over at before_valid (or at after_epoch without validation).
    r.on(wick::Point::before_valid, [this](wick::Context& c) { epoch_trained(c); });
    r.on(wick::Point::after_epoch, [this](wick::Context& c) { epoch_trained(c); });
    // A fit that ended early (max_steps, a stop request) still ends on the average.
    r.on(wick::Point::after_fit, [this](wick::Context& c) {
      if (count_ > 0 && !applied_) apply(c);
      in_fit_ = false;
    });
    r.on(wick::Point::after_cancel, [this](wick::Context& c) {
      if (c.cancellation()->ends_fit()) in_fit_ = false;
    });
  }

  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override {
    out.set_int("count", count_);
    out.set_int("last_epoch", last_epoch_);
    out.set_int("applied", applied_ ? 1 : 0);
    out.set_int("num_tensors", static_cast<std::int64_t>(avg_.size()));
    for (std::size_t i = 0; i < avg_.size(); ++i)
      out.set_tensor("avg." + std::to_string(i), avg_[i]);
  }
  void load_state(const wick::StateDict& in) override {
    count_ = in.get_int("count");
    last_epoch_ = in.get_int("last_epoch");
    applied_ = in.get_int("applied") != 0;
    avg_.clear();
    const auto n = static_cast<std::size_t>(in.get_int("num_tensors"));
    for (std::size_t i = 0; i < n; ++i) avg_.push_back(in.get_tensor("avg." + std::to_string(i)));
  }

 private:
  void epoch_trained(wick::Context& c) {
    const auto e = c.state().epoch;
    if (!in_fit_ || e < first_ || e == last_epoch_ || applied_) return;
    update(c);
    last_epoch_ = e;
    if (e + 1 == c.run().epochs || c.stop_requested()) apply(c);
  }

  void update(wick::Context& c) {
    torch::NoGradGuard no_grad;
    auto ps = c.model().parameters();
    if (!avg_.empty() && avg_.size() != ps.size())
      throw std::runtime_error("swa: the checkpoint holds " + std::to_string(avg_.size()) +
                               " averaged tensors but the model has " + std::to_string(ps.size()) +
                               " parameters");
    if (avg_.empty()) {
      for (const auto& p : ps) avg_.push_back(p.detach().to(torch::kFloat).clone());
    } else {
      const double w = 1.0 / static_cast<double>(count_ + 1);
      for (std::size_t i = 0; i < ps.size(); ++i) {
        auto& a = avg_[i];
        if (a.device() != ps[i].device()) a = a.to(ps[i].device());
        a.add_(ps[i].detach().to(torch::kFloat) - a, w);
      }
    }
    ++count_;
  }

  void apply(wick::Context& c) {
    {
      torch::NoGradGuard no_grad;
      auto ps = c.model().parameters();
      for (std::size_t i = 0; i < ps.size(); ++i) ps[i].detach().copy_(avg_[i]);
    }
    applied_ = true;
    const auto bns = recompute_batch_norm(c);
    if (c.run().is_main_process())
      std::fprintf(stderr, "swa: the model now holds the average of %lld epochs' weights%s\n",
                   static_cast<long long>(count_), bns.c_str());
  }

  // Returns what was done, for the message.
  std::string recompute_batch_norm(wick::Context& c) {
    namespace nn = torch::nn;
    struct Bn {
      std::function<void()> reset;
      c10::optional<double>* momentum;
    };
    std::vector<Bn> bns;
    for (const auto& m : c.model().modules(/*include_self=*/true)) {
      auto add = [&](auto* bn) {
        if (bn && bn->options.track_running_stats())
          bns.push_back({[bn] { bn->reset_running_stats(); }, &bn->options.momentum()});
      };
      add(m->as<nn::BatchNorm1dImpl>());
      add(m->as<nn::BatchNorm2dImpl>());
      add(m->as<nn::BatchNorm3dImpl>());
    }
    if (bns.empty() || !bn_update_)
      return bns.empty() ? "" : " (batch-norm statistics kept: bn_update = false)";
    auto data = c.task().train_data();
    if (!data || data->size() == wick::kUnsized || data->has_state())
      return " (batch-norm statistics kept: the training data is a stream or has state, which "
             "a second pass would move on)";
    std::vector<c10::optional<double>> momenta;
    for (auto& b : bns) {
      momenta.push_back(*b.momentum);
      *b.momentum = c10::nullopt;  // a cumulative mean over the batches
      b.reset();
    }
    auto& model = c.model();
    const bool was_training = model.is_training();
    model.train();
    const auto n = data->size(), bs = c.run().batch_size;
    const auto device = c10::Device(c.run().device.str());
    try {
      torch::NoGradGuard no_grad;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(c.run().seed));
      for (std::int64_t b = 0, i = 0; i < n; ++b, i += bs) {
        wick::Fetch f{wick::Phase::train, c.state().epoch, b, gen};
        auto batch = data->get(torch::arange(i, std::min(n, i + bs), torch::kLong), f);
        batch.input = batch.input.to(device);
        batch.target = batch.target.to(device);
        c.task().forward(c, batch);
      }
    } catch (const std::exception& e) {
      throw std::runtime_error(
          std::string("swa: recomputing batch-norm statistics over the training data failed: ") +
          e.what() + " (set bn_update = false to keep the trained statistics)");
    }
    for (std::size_t k = 0; k < bns.size(); ++k) *bns[k].momentum = momenta[k];
    model.train(was_training);
    return ", batch-norm statistics recomputed over " + std::to_string(n) + " training samples";
  }

  std::int64_t start_;
  bool bn_update_;
  std::int64_t first_ = 0;
  std::int64_t count_ = 0, last_epoch_ = -1;
  bool applied_ = false, in_fit_ = false;
  std::vector<at::Tensor> avg_;
};

}  // namespace

WICK_PLUGIN(Swa, wick::PluginDef("swa", "1.0.0",
                                 "Stochastic weight averaging of each epoch's weights from "
                                 "start_epoch; the average (batch norm recomputed) ends the run")
                     .one_instance()
                     .order(-110)
                     .param_int("start_epoch", -1,
                                "first epoch (0-based) whose weights are averaged; -1: the last "
                                "quarter of the epochs")
                     .param_bool("bn_update", true,
                                 "recompute batch-norm statistics for the averaged weights"))
