// Stochastic weight averaging (Izmailov et al., 2018): from epoch `start_epoch` on, the
// weights at the end of each epoch's training are averaged with equal weight,
// avg <- avg + (w - avg) / (n + 1). At the end of the last epoch's training the average
// replaces the weights and batch-norm statistics are recomputed for it (one forward pass over
// the training data in training mode, with a cumulative mean per batch), so the final
// validation, the last checkpoint, summary.json's model and `wick export` all use the
// averaged model. Earlier validations see the weights as trained. Use lr_schedule for the
// constant or cyclic rate SWA is usually run with.
// Its order (-110) puts it ahead of the checkpoint hook at after_epoch, so the checkpoint
// written there holds this epoch's average. Once the average is applied, the trained weights
// (and the state before a partial epoch's update, at a stop mid-epoch) are state too: a run
// resumed from that checkpoint to train on (more epochs, a larger max_steps) puts them back
// first, and goes on as the uninterrupted run does.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <wick/jit.hpp>
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
    r.on(wick::Point::before_epoch,
         [this](wick::Context& c) { train_batches_ = c.state().batches_in_epoch; });
    // A resume that trains on after the average was applied: at its first training step, the
    // weights as trained, and the average as it was before a partial epoch's update. A resume
    // that trains no batch (the same limits) keeps the average, as the run it continues did.
    r.on(wick::Point::before_step, [this](wick::Context& c) {
      if (applied_ && !trained_.empty() && c.state().training()) train_on(c);
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
    put(out, "avg", avg_);
    if (!applied_) return;
    put(out, "trained", trained_);
    if (before_.count >= 0) {
      out.set_int("before_partial", 1);
      out.set_int("before_count", before_.count);
      out.set_int("before_last_epoch", before_.last_epoch);
      put(out, "before_avg", before_.avg);
    }
  }
  void load_state(const wick::StateDict& in) override {
    count_ = in.get_int("count");
    last_epoch_ = in.get_int("last_epoch");
    applied_ = in.get_int("applied") != 0;
    avg_ = take(in, "avg");
    trained_ = in.has("num_trained") ? take(in, "trained") : std::vector<at::Tensor>{};
    before_ = {};
    if (in.has("before_partial")) {
      before_.count = in.get_int("before_count");
      before_.last_epoch = in.get_int("before_last_epoch");
      before_.avg = take(in, "before_avg");
    }
  }

 private:
  static void put(wick::StateDict& out, const std::string& name, const std::vector<at::Tensor>& v) {
    out.set_int("num_" + (name == "avg" ? std::string("tensors") : name),
                static_cast<std::int64_t>(v.size()));
    for (std::size_t i = 0; i < v.size(); ++i) out.set_tensor(name + "." + std::to_string(i), v[i]);
  }
  static std::vector<at::Tensor> take(const wick::StateDict& in, const std::string& name) {
    std::vector<at::Tensor> v;
    const auto n = static_cast<std::size_t>(
        in.get_int("num_" + (name == "avg" ? std::string("tensors") : name)));
    for (std::size_t i = 0; i < n; ++i) v.push_back(in.get_tensor(name + "." + std::to_string(i)));
    return v;
  }
  static at::Tensor on_cpu(const at::Tensor& t) {
    return t.detach().to(t.options().device(at::kCPU), /*non_blocking=*/false, /*copy=*/true);
  }
  // The model's parameters, then its buffers (batch norm's statistics, which apply() recomputes).
  static std::vector<at::Tensor> tensors_of(torch::nn::Module& m) {
    auto v = m.parameters();
    for (const auto& b : m.buffers()) v.push_back(b);
    return v;
  }

  void epoch_trained(wick::Context& c) {
    const auto e = c.state().epoch;
    if (!in_fit_ || e < first_ || e == last_epoch_ || applied_) return;
    // An epoch stopped before its last batch (max_steps, a stop request; not one a CancelEpoch
    // cut short, which counts as done) is averaged as it is; the state before that update is
    // kept (on the CPU), for a resume that trains the epoch's rest.
    before_ = {};
    if (const auto at = c.position();
        c.stop_requested() && at.epoch == e && at.batch < train_batches_) {
      before_.count = count_;
      before_.last_epoch = last_epoch_;
      for (const auto& a : avg_) before_.avg.push_back(on_cpu(a));
    }
    update(c);
    last_epoch_ = e;
    if (e + 1 == c.run().epochs || c.stop_requested()) apply(c);
  }

  // The weights back as trained (the checkpoint's model holds the average), and the average
  // as it was before a partial epoch's update: the run goes on as if never averaged.
  void train_on(wick::Context& c) {
    torch::NoGradGuard no_grad;
    auto ts = tensors_of(c.model());
    if (ts.size() != trained_.size())
      throw std::runtime_error("swa: the checkpoint holds " + std::to_string(trained_.size()) +
                               " trained tensors but the model has " + std::to_string(ts.size()));
    for (std::size_t i = 0; i < ts.size(); ++i) ts[i].copy_(trained_[i]);
    if (before_.count >= 0) {
      count_ = before_.count;
      last_epoch_ = before_.last_epoch;
      avg_ = std::move(before_.avg);
    }
    trained_.clear();
    before_ = {};
    applied_ = false;
  }

  void update(wick::Context& c) {
    torch::NoGradGuard no_grad;
    auto ps = c.model().parameters();
    if (!avg_.empty() && avg_.size() != ps.size())
      throw std::runtime_error("swa: the checkpoint holds " + std::to_string(avg_.size()) +
                               " averaged tensors but the model has " + std::to_string(ps.size()) +
                               " parameters");
    if (avg_.empty()) {
      // Float32 at least (bf16 weights), float64 for a float64 model.
      for (const auto& p : ps)
        avg_.push_back(p.detach().to(at::promote_types(p.scalar_type(), torch::kFloat)).clone());
    } else {
      const double w = 1.0 / static_cast<double>(count_ + 1);
      for (std::size_t i = 0; i < ps.size(); ++i) {
        auto& a = avg_[i];
        if (a.device() != ps[i].device()) a = a.to(ps[i].device());
        a.add_(ps[i].detach().to(a.scalar_type()) - a, w);
      }
    }
    ++count_;
  }

  void apply(wick::Context& c) {
    {
      torch::NoGradGuard no_grad;
      trained_.clear();  // on the CPU: no second model on the device for the rest of the fit
      for (const auto& t : tensors_of(c.model())) trained_.push_back(on_cpu(t));
      auto ps = c.model().parameters();
      for (std::size_t i = 0; i < ps.size(); ++i) ps[i].detach().copy_(avg_[i]);
    }
    applied_ = true;
    const auto bns = recompute_batch_norm(c);
    if (c.run().is_main_process())
      std::fprintf(stderr, "swa: the model now holds the average of %lld epochs' weights%s\n",
                   static_cast<long long>(count_), bns.c_str());
  }

  // A TorchScript batch norm (a trainable JitModule's), whose momentum is a constant of its
  // code (a scripted module's type holds it; a traced one's graph has it inlined): its
  // statistics are read back after each batch, from zeroed buffers, as momentum * the
  // batch's. A traced one's momentum is found by a first pass from buffers of ones.
  struct ScriptedBn {
    at::Tensor mean, var, count;   // the scripted module's buffers
    double momentum = -1;          // -1: not known before the first batch
    at::Tensor from_ones;          // a traced one's running_mean after the first batch, from ones
    at::Tensor sum_mean, sum_var;  // of the batches' statistics
    std::size_t first = 0;         // where its three buffers are in recompute's list
    void zero() {
      mean.zero_();
      var.zero_();
      count.zero_();  // a momentum of None: each batch's factor is then 1 / 1
    }
  };

  static std::vector<ScriptedBn> scripted_batch_norms(torch::nn::Module& model) {
    std::vector<ScriptedBn> out;
    for (const auto& m : model.modules(/*include_self=*/true)) {
      auto* j = m->as<wick::JitModuleImpl>();
      if (!j || j->mode() != wick::JitMode::trainable) continue;  // a frozen part stays in eval
      for (const auto& sub : j->jit().modules()) {
        // torch.nn's BatchNorm1d/2d/3d, SyncBatchNorm (as update_bn: not instance norms).
        const auto type = sub.type();
        if (type->name()->qualifiedName().find("BatchNorm") == std::string::npos) continue;
        auto tensor = [&](const char* name) {
          return sub.hasattr(name) && sub.attr(name).isTensor() ? sub.attr(name).toTensor()
                                                                : at::Tensor();
        };
        ScriptedBn bn;
        bn.mean = tensor("running_mean");
        bn.var = tensor("running_var");
        bn.count = tensor("num_batches_tracked");
        if (!bn.mean.defined() || !bn.var.defined() || !bn.count.defined()) continue;
        if (type->hasConstant("momentum")) {
          const auto m = type->getConstant("momentum");
          bn.momentum = m.isNone() ? 1.0 : m.toDouble();
        }
        out.push_back(std::move(bn));
      }
    }
    return out;
  }

  // Returns what was done, for the message.
  std::string recompute_batch_norm(wick::Context& c) {
    namespace nn = torch::nn;
    std::vector<c10::optional<double>*> momenta;  // the C++ batch norms'
    std::vector<std::function<void()>> resets;    // theirs too
    std::vector<at::Tensor> buffers;              // every batch norm's statistics
    for (const auto& m : c.model().modules(/*include_self=*/true)) {
      auto add = [&](auto* bn) {
        if (!bn || !bn->options.track_running_stats()) return;
        momenta.push_back(&bn->options.momentum());
        resets.push_back([bn] { bn->reset_running_stats(); });
        buffers.insert(buffers.end(), {bn->running_mean, bn->running_var, bn->num_batches_tracked});
      };
      add(m->as<nn::BatchNorm1dImpl>());
      add(m->as<nn::BatchNorm2dImpl>());
      add(m->as<nn::BatchNorm3dImpl>());
    }
    auto scripted = scripted_batch_norms(c.model());
    for (auto& s : scripted) {
      s.first = buffers.size();
      buffers.insert(buffers.end(), {s.mean, s.var, s.count});
    }
    if (buffers.empty()) return "";
    if (!bn_update_) return " (batch-norm statistics kept: bn_update = false)";
    auto data = c.task().train_data();
    if (!data || data->size() == wick::kUnsized || data->has_state())
      return " (batch-norm statistics kept: the training data is a stream or has state, which "
             "a second pass would move on)";
    auto& model = c.model();
    const bool was_training = model.is_training();
    std::vector<at::Tensor> kept;
    for (const auto& t : buffers) kept.push_back(t.clone());
    std::vector<c10::optional<double>> kept_momenta;
    for (auto* m : momenta) kept_momenta.push_back(*m);
    // The model as it was, whatever way this ends: on a failure, the trained statistics.
    bool done = false;
    const std::shared_ptr<void> put_back(nullptr, [&](void*) {
      torch::NoGradGuard no_grad;
      if (!done)
        for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(kept[i]);
      for (std::size_t i = 0; i < momenta.size(); ++i) *momenta[i] = kept_momenta[i];
      model.train(was_training);
    });
    model.train();
    const auto n = data->size(), bs = c.run().batch_size;
    const auto device = c10::Device(c.run().device.str());
    const auto seed = static_cast<std::uint64_t>(c.run().seed);
    torch::NoGradGuard no_grad;
    auto forward = [&](std::int64_t b, at::Generator& gen) {
      wick::Fetch f{wick::Phase::train, c.state().epoch, b, gen};
      auto batch = data->get(torch::arange(b * bs, std::min(n, (b + 1) * bs), torch::kLong), f);
      batch.input = batch.input.to(device);
      batch.target = batch.target.to(device);
      c.task().forward(c, batch);
    };
    std::int64_t batches = 0;
    try {
      const bool probe = std::any_of(scripted.begin(), scripted.end(),
                                     [](const ScriptedBn& s) { return s.momentum < 0; });
      if (probe) {
        // The first batch as the pass below draws it, and its dropout (on the CPU) as well.
        for (auto& s : scripted) {
          s.mean.fill_(1);
          s.var.fill_(1);
          s.count.zero_();
        }
        auto cpu = at::detail::getDefaultCPUGenerator();
        const auto cpu_state = cpu.get_state();
        auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
        forward(0, gen);  // before the C++ batch norms' reset, which it would count otherwise
        cpu.set_state(cpu_state);
        for (auto& s : scripted) s.from_ones = s.mean.clone();
      }
      for (auto* m : momenta) *m = c10::nullopt;  // a cumulative mean over the batches
      for (auto& reset : resets) reset();
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
      for (; batches * bs < n; ++batches) {
        for (auto& s : scripted) s.zero();
        forward(batches, gen);
        for (auto& s : scripted) {
          if (s.momentum < 0)  // from ones, (1 - m) + m x; from zeros, m x
            s.momentum = 1.0 - (s.from_ones - s.mean).to(torch::kDouble).mean().item<double>();
          if (s.momentum < 1e-6) continue;  // statistics that never move: put back below
          const auto mean = s.mean / s.momentum, var = s.var / s.momentum;
          s.sum_mean = batches == 0 ? mean : s.sum_mean + mean;
          s.sum_var = batches == 0 ? var : s.sum_var + var;
        }
      }
    } catch (const std::exception& e) {
      throw std::runtime_error(
          std::string("swa: recomputing batch-norm statistics over the training data failed: ") +
          e.what() + " (set bn_update = false to keep the trained statistics)");
    }
    for (auto& s : scripted) {
      if (s.momentum < 1e-6) {  // nothing a pass could change
        for (std::size_t i = s.first; i < s.first + 3; ++i) buffers[i].copy_(kept[i]);
        continue;
      }
      s.mean.copy_(s.sum_mean / static_cast<double>(batches));
      s.var.copy_(s.sum_var / static_cast<double>(batches));
      s.count.fill_(batches);
    }
    done = true;
    return ", batch-norm statistics recomputed over " + std::to_string(n) + " training samples";
  }

  std::int64_t start_;
  bool bn_update_;
  std::int64_t first_ = 0;
  std::int64_t count_ = 0, last_epoch_ = -1;
  bool applied_ = false, in_fit_ = false;
  std::int64_t train_batches_ = 0;  // the training batches of the running epoch
  std::vector<at::Tensor> avg_;
  std::vector<at::Tensor> trained_;  // once applied: the weights (and buffers) as trained
  struct {
    std::int64_t count = -1, last_epoch = -1;  // count -1: the last update was a whole epoch's
    std::vector<at::Tensor> avg;
  } before_;
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
