// Test-only task for the data loader: tiny 1x8x8 "images" or a stream, as
//   augment  a torch::data per-sample dataset (wick::from_torch_dataset) with a random crop
//            and flip drawn from wick::fetch_generator()
//   stream   a stateful stream (size wick::kUnsized) that checks it is read in order
//   throw    a dataset whose get() fails on the batch holding sample `fail_at`
// and, with log_samples, writes down which samples each training batch held.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <wick/plugin.hpp>
#include <wick/task.hpp>
#include <wick/torch_data.hpp>

namespace {

at::Tensor images(std::int64_t n) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(123);
  return torch::rand({n, 1, 8, 8}, gen);
}
at::Tensor labels(std::int64_t n) {
  return torch::arange(n, torch::kLong).remainder(4);
}

// Pads by 1, crops 8x8 at a random offset, flips half of the time: all from the batch's
// generator, so the draws do not depend on the loader thread.
struct Augmented : torch::data::datasets::Dataset<Augmented> {
  at::Tensor x, y;
  torch::data::Example<> get(std::size_t i) override {
    auto gen = wick::fetch_generator();
    auto off = torch::randint(0, 3, {2}, gen, torch::kLong);
    const auto r = off[0].item<std::int64_t>(), c = off[1].item<std::int64_t>();
    auto img = torch::constant_pad_nd(x[static_cast<std::int64_t>(i)], {1, 1, 1, 1})
                   .slice(1, r, r + 8)
                   .slice(2, c, c + 8);
    if (torch::rand({1}, gen).item<double>() < 0.5) img = img.flip({2});
    return {img.contiguous(), y[static_cast<std::int64_t>(i)]};
  }
  torch::optional<std::size_t> size() const override { return static_cast<std::size_t>(x.size(0)); }
};

class Stream : public wick::Dataset {
 public:
  std::int64_t size() const override { return wick::kUnsized; }
  wick::Batch get(const at::Tensor& indices, wick::Fetch&) override {
    const auto first = indices[0].item<std::int64_t>();
    if (first != next_)
      throw std::runtime_error("stream read out of order: sample " + std::to_string(first) +
                               " asked, " + std::to_string(next_) + " next");
    next_ += indices.size(0);
    auto n = indices.to(torch::kFloat).unsqueeze(1);
    auto x = torch::sin(n * 0.37 + torch::arange(64, torch::kFloat) * 0.11).view({-1, 1, 8, 8});
    return {x, indices.remainder(4)};
  }
  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override { out.set_int("next", next_); }
  void load_state(const wick::StateDict& in) override { next_ = in.get_int("next"); }

 private:
  std::int64_t next_ = 0;
};

class Failing : public wick::TensorDataset {
 public:
  Failing(at::Tensor x, at::Tensor y, std::int64_t fail_at)
      : TensorDataset(std::move(x), std::move(y)), fail_at_(fail_at) {}
  wick::Batch get(const at::Tensor& indices, wick::Fetch& f) override {
    if (indices.eq(fail_at_).any().item<bool>())
      throw std::runtime_error("bad record " + std::to_string(fail_at_) + " in images.bin");
    return TensorDataset::get(indices, f);
  }

 private:
  std::int64_t fail_at_;
};

// Appends "epoch batch: i i ..." for every training batch to PREFIX-rankR.txt (R from RANK),
// flushed per line: what each rank saw, even in a run killed later.
class Logged : public wick::Dataset {
 public:
  Logged(std::shared_ptr<wick::Dataset> inner, const std::string& prefix)
      : inner_(std::move(inner)) {
    const char* rank = std::getenv("RANK");
    path_ = prefix + "-rank" + (rank ? rank : "0") + ".txt";
  }
  std::int64_t size() const override { return inner_->size(); }
  wick::Batch get(const at::Tensor& indices, wick::Fetch& f) override {
    if (f.phase == wick::Phase::train) {
      std::string line = std::to_string(f.epoch) + " " + std::to_string(f.batch) + ":";
      const auto idx = indices.contiguous();
      for (std::int64_t i = 0; i < idx.numel(); ++i)
        line += " " + std::to_string(idx.data_ptr<std::int64_t>()[i]);
      if (std::FILE* out = std::fopen(path_.c_str(), "a")) {
        std::fprintf(out, "%s\n", line.c_str());
        std::fclose(out);
      }
    }
    return inner_->get(indices, f);
  }
  bool has_state() const override { return inner_->has_state(); }
  void save_state(wick::StateDict& out) const override { inner_->save_state(out); }
  void load_state(const wick::StateDict& in) override { inner_->load_state(in); }

 private:
  std::shared_ptr<wick::Dataset> inner_;
  std::string path_;
};

class DataTask : public wick::ClassificationTask {
 public:
  explicit DataTask(const wick::Params& p)
      : kind_(p.get_string("kind")), optimizer_(p.get_string("default_optimizer")) {
    const std::int64_t n = p.get_int("samples");
    if (kind_ == "augment") {
      Augmented a;
      a.x = images(n);
      a.y = labels(n);
      train_ = wick::from_torch_dataset(std::move(a));
    } else if (kind_ == "stream") {
      train_ = std::make_shared<Stream>();
    } else {
      train_ = std::make_shared<Failing>(images(n), labels(n), p.get_int("fail_at"));
    }
    if (!p.get_string("log_samples").empty())
      train_ = std::make_shared<Logged>(train_, p.get_string("log_samples"));
  }
  std::shared_ptr<torch::nn::Module> model() override {
    net_ = torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(64, 16), torch::nn::ReLU(),
                                 torch::nn::Linear(16, 4));
    return net_.ptr();
  }
  std::shared_ptr<wick::Dataset> train_data() override { return train_; }
  wick::OptimizerDefaults default_optimizer() const override { return {optimizer_, 1e-3}; }
  at::Tensor forward(wick::Context&, const wick::Batch& b) override {
    return net_->forward(b.input);
  }

 private:
  std::string kind_, optimizer_;
  std::shared_ptr<wick::Dataset> train_;
  torch::nn::Sequential net_{nullptr};
};

}  // namespace

WICK_PLUGIN(DataTask,
            wick::PluginDef("data_task", "1.0.0", "Test-only: augmented, streamed, failing data")
                .param_choice("kind", {"augment", "stream", "throw"}, "augment", "which data")
                .param_int("samples", 64, "samples (augment, throw)")
                .param_int("fail_at", 13, "throw: the sample whose batch fails (-1: none)")
                .param_string("log_samples", "",
                              "append each training batch's samples to THIS-rankR.txt")
                .param_string("default_optimizer", "adam",
                              "the name default_optimizer() gives (used without [optimizer])"))
