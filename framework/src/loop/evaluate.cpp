// Using a trained model: evaluate and predict (its weights are loaded by final_weights.cpp).
// They share the fit's evaluation pass (eval mode, no gradient, this rank's shard in sample
// order) and touch nothing of the run but the model's weights.
#include "data/sampler.hpp"
#include "dist/ranks.hpp"
#include "loop/trainer_impl.hpp"
#include "wick/params.hpp"

namespace wick {

namespace {

// Rows of a tensor the caller gives predict(); no targets.
class RowsDataset : public Dataset {
 public:
  explicit RowsDataset(at::Tensor rows) : rows_(std::move(rows)) {}
  std::int64_t size() const override { return rows_.size(0); }
  Batch get(const at::Tensor& indices, Fetch&) override {
    return {rows_.index_select(0, indices), at::Tensor()};
  }

 private:
  at::Tensor rows_;
};

std::string shape_of(at::IntArrayRef s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The data of a split, checked to be something an evaluation can run over.
Dataset& split_data(Trainer::Impl& I, Split split) {
  Dataset* ds = split == Split::valid ? I.valid_ds.get() : I.train_ds.get();
  if (!ds)
    throw ConfigError(
        "the task has no validation data (its valid_data() gives none); use the training "
        "split (--split train)");
  if (ds->size() == kUnsized)
    throw ConfigError("the task's " + std::string(to_string(split)) +
                      " data is a stream without a size; evaluate and predict run over a "
                      "finite data set");
  return *ds;
}

}  // namespace

const char* to_string(Split s) {
  return s == Split::train ? "train" : "valid";
}

void Trainer::Impl::join_ranks_if_needed() {
  if (state.num_processes <= 1 || collectives) return;
  own_collectives = join_ranks(state.rank, state.num_processes);
  collectives = own_collectives.get();
}

ValidResult Trainer::evaluate(Split split) {
  auto& I = *impl_;
  Dataset& ds = split_data(I, split);
  I.join_ranks_if_needed();
  return I.validation(&ds, std::string(to_string(split)) + "/");
}

at::Tensor Trainer::Impl::prediction(Dataset& ds, const char* what, const ProgressFn& progress) {
  torch::NoGradGuard no_grad;
  model->eval();
  state.phase = Phase::valid;
  const std::int64_t n = ds.size();
  const at::Tensor order = valid_order(n, sharding());
  LoadPlan plan = eval_plan(ds, order, what);
  const std::int64_t batches = plan.end, mine = order.size(0);
  std::vector<at::Tensor> outs;
  std::int64_t done = 0;
  {
    BatchLoader loader(std::move(plan), opt.num_workers);
    for (std::int64_t b = 0; b < batches; ++b) {
      state.batch_idx = b;
      const std::int64_t m = loader.size_of(b);
      state.batch_size = m;
      dispatch.set_where("predict");
      batch = to_device(loader.take(b).batch);
      output = Output{};
      dispatch.run_stage(Stage::forward);
      const auto& pred = output.pred;
      if (!pred.defined() || pred.dim() == 0 || pred.size(0) != m)
        throw std::runtime_error("the task's forward() gave " +
                                 (pred.defined() ? "a prediction of shape " + shape_of(pred.sizes())
                                                 : std::string("no prediction")) +
                                 " for a batch of " + std::to_string(m) +
                                 " samples; predict needs one output row per sample");
      outs.push_back(pred.detach().to(at::kCPU, at::kFloat));
      done += m;
      if (progress) progress(done, mine);
    }
  }
  model->train();
  state.phase = Phase::train;
  at::Tensor rows = outs.empty() ? at::Tensor() : at::cat(outs);
  if (!distributed()) return rows;
  // The shards are contiguous and in rank order (valid_order): joined, they are in order. A
  // rank without samples (fewer samples than ranks) joins too, so that all ranks stop alike.
  return join_rows(rows.defined() ? rows : at::empty({0}));
}

at::Tensor Trainer::predict(Split split, const ProgressFn& progress) {
  auto& I = *impl_;
  Dataset& ds = split_data(I, split);
  I.join_ranks_if_needed();
  return I.prediction(ds, split == Split::valid ? "the validation data" : "the training data",
                      progress);
}

at::Tensor Trainer::predict(const at::Tensor& input, const ProgressFn& progress) {
  auto& I = *impl_;
  if (!input.defined() || input.dim() == 0 || input.size(0) == 0)
    throw ConfigError("the input holds no sample; give one row per sample, [N, ...]");
  // One sample of the task's own data says what a row must look like.
  Dataset* own = I.valid_ds ? I.valid_ds.get() : I.train_ds.get();
  at::Tensor rows = input;
  if (own->size() > 0 && !own->has_state()) {
    LoadPlan plan = I.eval_plan(*own, at::zeros({1}, at::kLong), "the task's data");
    const at::Tensor like = load_batch(plan, 0, plan.indices(0)).batch.input;
    if (like.defined()) {
      if (rows.sizes().slice(1) != like.sizes().slice(1))
        throw ConfigError("the input's samples have shape " + shape_of(rows.sizes().slice(1)) +
                          " but the task's inputs have " + shape_of(like.sizes().slice(1)) +
                          "; give one row per sample, shaped as the task's inputs");
      const bool want_float = at::isFloatingType(like.scalar_type());
      if (!want_float && at::isFloatingType(rows.scalar_type()))
        throw ConfigError(std::string("the input holds floating point values but the task's "
                                      "inputs are ") +
                          c10::toString(like.scalar_type()) + "; give integer values");
      rows = rows.to(like.scalar_type());
    }
  }
  I.join_ranks_if_needed();
  RowsDataset ds(rows);
  return I.prediction(ds, "the input", progress);
}

}  // namespace wick
