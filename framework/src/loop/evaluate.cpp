// The evaluator (evaluator.hpp), and the Trainer's evaluate and predict over a trained model
// (its weights are loaded by final_weights.cpp): they touch nothing of the run but the
// model's weights.
#include "loop/scope.hpp"
#include "loop/trainer_impl.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "wick/params.hpp"
#include "wick/state_dict.hpp"

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

// A key a metric's compute() gives: "" or a word, which records, CSV columns and TensorBoard
// tags take as it is (valid/NAME/KEY); each once. Throws naming the key otherwise.
void check_metric_keys(const std::vector<std::pair<std::string, double>>& values) {
  std::vector<std::string> seen;
  for (const auto& kv : values) {
    const auto& k = kv.first;
    const bool word = std::all_of(k.begin(), k.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-' || c == '.';
    });
    if (!word || k.size() > 64)
      throw std::runtime_error("compute() gave a value under the key '" + k.substr(0, 64) +
                               "'; a key is \"\" or at most 64 letters, digits, '_', '-' and "
                               "'.' (it becomes part of valid/NAME/KEY; a bug in the plugin)");
    if (std::find(seen.begin(), seen.end(), k) != seen.end())
      throw std::runtime_error("compute() gave two values under the key '" + k +
                               "' (a bug in the plugin)");
    seen.push_back(k);
  }
}

// Whether two names are the same letters, whatever their case (as a file system may take them).
bool same_letters(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The data of a split, checked to be something an evaluation can run over.
Dataset& split_data(Trainer::Impl& I, Split split) {
  Dataset* ds = split == Split::valid ? I.valid_ds.get() : I.train_ds.get();
  if (!ds) {
    const bool train_sized = I.train_ds && I.train_ds->size() != kUnsized;
    throw ConfigError(std::string("the task has no validation data (its valid_data() gives "
                                  "none); ") +
                      (train_sized ? "use the training split (--split train)"
                                   : "configure the task's validation data (its training data "
                                     "is a stream, which evaluate and predict cannot run over)"));
  }
  if (ds->size() == kUnsized)
    throw ConfigError("the task's " + std::string(to_string(split)) +
                      " data is a stream without a size; evaluate and predict run over a "
                      "finite data set");
  return *ds;
}

// A validation pass's sums on the device, weighted by batch size: the loss, the task's
// metrics (in the order they first came) and the sample count.
struct PassSums {
  at::Tensor loss;
  std::vector<std::string> names;
  std::vector<at::Tensor> values;
  std::int64_t count = 0;

  void add(const Output& out, std::int64_t m) {
    const double w = static_cast<double>(m);
    auto l = out.loss.detach().to(torch::kDouble) * w;
    loss = loss.defined() ? loss + l : l;
    for (const auto& [k, v] : out.metrics) {
      std::size_t i = 0;
      while (i < names.size() && names[i] != k) ++i;
      auto x = v.detach().to(torch::kDouble) * w;
      if (i == names.size()) {
        names.push_back(k);
        values.push_back(x);
      } else {
        values[i] = values[i] + x;
      }
    }
    count += m;
  }
  // [loss, metrics..., count] as one float64 CPU vector: one device sync, one all-reduce.
  at::Tensor packed() const {
    std::vector<at::Tensor> parts;
    parts.push_back(loss.defined() ? loss.reshape({1}).cpu() : torch::zeros({1}, torch::kDouble));
    for (const auto& v : values) parts.push_back(v.reshape({1}).cpu());
    parts.push_back(torch::full({1}, static_cast<double>(count), torch::kDouble));
    return torch::cat(parts);
  }
};

}  // namespace

const char* to_string(Split s) {
  return s == Split::train ? "train" : "valid";
}

void Evaluator::add_metric(MetricEntry entry) {
  if (!entry.metric) throw std::invalid_argument("add_metric: no metric");
  for (const auto& m : metrics_)
    if (m.instance == entry.instance)
      throw ConfigError("two metrics named '" + entry.instance + "'; give one another name");
  // A metric names its files in the run folder after itself (confusion_matrix: NAME.csv, and
  // wick plot's NAME.png beside it): not as the run's own, in any case of its letters.
  for (const char* own : {"metrics", "summary", "model", "wick", "curves"})
    if (same_letters(entry.instance, own))
      throw ConfigError("a metric named '" + entry.instance + "' (plugin '" + entry.plugin +
                        "') would write its files over the run folder's own " + own +
                        ".* (metrics.jsonl, metrics_log's metrics.csv, summary.json, model.pt, "
                        "wick.lock, wick plot's curves.png); give it another name (name = "
                        "\"...\" in its [[metrics]] table)");
  // Its values are valid/NAME (train/NAME): one named loss would replace the loss's own.
  if (entry.instance == "loss")
    throw ConfigError("a metric named 'loss' (plugin '" + entry.plugin +
                      "') would replace valid/loss, which the summary, a best checkpoint and "
                      "early stopping read; give it another name (name = \"...\" in its "
                      "[[metrics]] table)");
  const std::string who = "metric '" + entry.instance + "' (plugin '" + entry.plugin + "')";
  places_.emplace_back(who + " on a validation batch", who + " computing its value");
  metrics_.push_back(std::move(entry));
}

LoadPlan Evaluator::eval_plan(Dataset& ds, const at::Tensor& order, const char* what) const {
  const std::int64_t local = order.size(0), bs = p_.run.valid_batch_size;
  LoadPlan plan;
  plan.ds = &ds;
  plan.phase = Phase::valid;
  plan.seed = p_.opt.seed;
  plan.epoch = p_.state.epoch;
  plan.end = (local + bs - 1) / bs;
  plan.what = what;
  plan.pin = p_.device.is_cuda();
  plan.indices = [order, local, bs](std::int64_t b) {
    return order.slice(0, b * bs, std::min(local, (b + 1) * bs));
  };
  return plan;
}

void Evaluator::probe_metrics(Dataset* ds) {
  if (metrics_.empty() || !ds || ds->size() <= 0 || ds->has_state()) return;
  torch::NoGradGuard no_grad;
  p_.model->eval();
  p_.state.phase = Phase::valid;
  LoadPlan plan = eval_plan(*ds, at::arange(std::min<std::int64_t>(2, ds->size()), at::kLong),
                            "the validation data");
  const Output& out = p_.pass.run_batch(load_batch(plan, 0, plan.indices(0)).batch, false);
  for (std::size_t i = 0; i < metrics_.size(); ++i) {
    try {
      metrics_[i].metric->update(out.pred.detach(), p_.pass.running_batch().target);
    } catch (const std::exception& e) {
      throw ConfigError(places_[i].first + ": " + e.what());
    }
    metrics_[i].metric->reset();
  }
  p_.model->train();
  p_.state.phase = Phase::train;
}

ValidResult Evaluator::validation(Dataset* ds, const std::string& prefix) {
  ValidResult res;
  if (!ds) return res;
  torch::NoGradGuard no_grad;
  p_.model->eval();
  p_.state.phase = Phase::valid;
  const std::int64_t saved_batch = p_.state.batch_idx, saved_nb = p_.state.batches_in_epoch;
  const bool valid = ds == p_.valid_ds.get();
  // The dispatcher keeps a view of its place: literals only.
  const char* get_where = valid ? "the validation data's get()" : "the training data's get()";
  const char* what = valid ? "the validation data" : "the training data";
  check_valid_shards(ds->size(), sharding(), what);
  LoadPlan plan = eval_plan(*ds, valid_order(ds->size(), sharding()), what);
  p_.state.batches_in_epoch = plan.end;
  p_.state.batch_idx = 0;

  PassSums sums;
  for (auto& m : metrics_) m.metric->reset();
  // CancelStep skips one validation batch, CancelEpoch the rest of this validation.
  run_scope<CancelScope::epoch>(
      [&] {
        p_.events.emit(Point::before_valid);
        BatchLoader loader(std::move(plan), p_.opt.num_workers);
        for (std::int64_t b = 0; b < p_.state.batches_in_epoch; ++b) {
          p_.state.batch_idx = b;
          run_scope<CancelScope::step>(
              [&] {
                const std::int64_t m = loader.size_of(b);
                p_.state.batch_size = m;
                p_.events.emit(Point::before_step);
                p_.events.set_where(get_where);
                const Output& out = p_.pass.run_batch(loader.take(b).batch, /*with_loss=*/true);
                sums.add(out, m);
                for (std::size_t i = 0; i < metrics_.size(); ++i) {
                  p_.events.set_where(places_[i].first);
                  metrics_[i].metric->update(out.pred.detach(), p_.pass.running_batch().target);
                }
                p_.events.emit(Point::after_step);
              },
              p_.cancelled);
        }
      },
      p_.cancelled);
  // One device sync for the whole validation; one all-reduce across ranks when data-parallel.
  auto packed = sums.packed();
  p_.ranks.all_reduce_sum(packed);
  auto acc = packed.accessor<double, 1>();
  const double total = acc[packed.size(0) - 1];
  res.samples = static_cast<std::int64_t>(total);
  // A hook's CancelStep (a batch) or CancelEpoch (the rest) cut the pass: its values are over
  // what ran, which a monitor (best checkpoint, early stopping) would take for the whole set.
  if (res.samples < ds->size() && ds->size() != kUnsized && p_.state.rank == 0) {
    std::fprintf(stderr,
                 "wick: warning: the pass over %s in epoch %lld covered %lld of its %lld samples "
                 "(a hook's CancelStep or CancelEpoch): its %s values are over those only\n",
                 what, static_cast<long long>(p_.state.epoch), static_cast<long long>(res.samples),
                 static_cast<long long>(ds->size()), prefix.c_str());
  }
  if (total > 0) {
    res.values.emplace_back(prefix + "loss", acc[0] / total);
    for (std::size_t k = 0; k < sums.names.size(); ++k)
      res.values.emplace_back(prefix + sums.names[k],
                              acc[static_cast<std::int64_t>(k) + 1] / total);
    compute_metrics(res, prefix);
  }
  p_.model->train();
  p_.state.phase = Phase::train;
  p_.state.batch_idx = saved_batch;
  p_.state.batches_in_epoch = saved_nb;
  return res;
}

void Evaluator::compute_metrics(ValidResult& res, const std::string& prefix) {
  if (metrics_.empty()) return;
  // Every state tensor of every metric, flattened into one float64 vector: one all-reduce.
  // A rank without validation samples has empty states: the size check below then stops every
  // rank alike.
  std::vector<at::Tensor> flat = {at::zeros({0}, at::kDouble)};
  for (auto& e : metrics_)
    for (const auto& t : e.metric->state())
      flat.push_back(t.detach().to(at::kCPU, at::kDouble).reshape({-1}));
  // Row tensors (Metric::rows, SDK 2.2) are joined over the ranks, not summed.
  std::vector<at::Tensor*> rows;
  for (auto& e : metrics_)
    if (e.api_minor >= 2)
      if (auto* r = e.metric->rows())
        for (auto& t : *r) rows.push_back(&t);
  if (p_.ranks.distributed()) {
    auto packed = at::cat(flat);
    // Ranks whose states differ in shape cannot be summed: say so, not garble the sum. The
    // sizes agree when the sum of their squares is world * size²; every rank sees the same
    // sums, so all of them decide alike (none is left waiting in the next all-reduce).
    const double n = static_cast<double>(packed.numel()), r = static_cast<double>(rows.size());
    auto sizes = at::tensor({n, n * n, r, r * r}, at::kDouble);
    p_.ranks.all_reduce_sum(sizes);
    const double w = static_cast<double>(p_.state.num_processes);
    if (sizes[1].item<double>() * w != sizes[0].item<double>() * sizes[0].item<double>() ||
        sizes[3].item<double>() * w != sizes[2].item<double>() * sizes[2].item<double>())
      throw std::runtime_error(
          "the ranks' metric states differ in size (a rank saw other prediction shapes, or no "
          "validation sample), so they cannot be summed; every rank must see the same "
          "prediction shapes, and at least one validation sample");
    p_.ranks.all_reduce_sum(packed);
    std::int64_t off = 0;
    for (auto& e : metrics_)
      for (auto& t : e.metric->state()) {
        const std::int64_t len = t.numel();
        t.copy_(packed.slice(0, off, off + len).reshape(t.sizes()).to(t.options()));
        off += len;
      }
    for (auto* t : rows) *t = join_rows(*t).to(t->device());
  }
  for (std::size_t i = 0; i < metrics_.size(); ++i) {
    auto& e = metrics_[i];
    p_.events.set_where(places_[i].second);
    if (e.metric->state().empty())
      throw std::runtime_error(
          "it has no state after the validation's updates (a bug in the "
          "plugin: update() must size its state)");
    // The whole-set value replaces a task's per-batch mean of the same name.
    const auto values = e.metric->compute();
    check_metric_keys(values);
    for (const auto& [k, v] : values) {
      const std::string key = prefix + e.instance + (k.empty() ? "" : "/" + k);
      // metrics.jsonl writes it as null, which a reader may take for "not logged".
      if (!std::isfinite(v) && p_.state.rank == 0 && nonfinite_said_.insert(key).second)
        std::fprintf(stderr,
                     "wick: warning: metric '%s' (plugin '%s') gave %s for %s (metrics.jsonl "
                     "writes null): undefined on this data (a class with no samples?), or a "
                     "bug in the plugin; said once\n",
                     e.instance.c_str(), e.plugin.c_str(), std::isnan(v) ? "NaN" : "an infinity",
                     key.c_str());
      set_value(res.values, key, v);
    }
    // Files only from a fit that holds the run folder (not Trainer::validate from outside).
    if (p_.writes_metric_files()) e.metric->write_files(p_.run.output_dir, e.instance);
  }
}

at::Tensor Evaluator::join_rows(const at::Tensor& mine) {
  const std::int64_t world = p_.state.num_processes, rank = p_.state.rank;
  // Row counts by rank, then the shape of a row (rank, 8 sizes) and its squares: the ranks
  // agree on it when sum² = world * squares, and all of them see the same sums.
  constexpr std::int64_t kDims = 9;
  auto head = at::zeros({world + 2 * kDims}, at::kDouble);
  auto h = head.accessor<double, 1>();
  h[rank] = static_cast<double>(mine.dim() > 0 ? mine.size(0) : 0);
  for (std::int64_t i = 0; i < kDims; ++i) {
    const double d = i == 0 ? mine.dim() : (i < mine.dim() ? mine.size(i) : 0);
    h[world + i] = d;
    h[world + kDims + i] = d * d;
  }
  p_.ranks.all_reduce_sum(head);
  const auto sum = head.slice(0, world, world + kDims);
  const auto squares = head.slice(0, world + kDims);
  if (mine.dim() == 0 || mine.dim() > kDims ||
      !at::equal(sum * sum, squares * static_cast<double>(world)))
    throw std::runtime_error(
        "the ranks' rows differ in shape (" + std::to_string(mine.dim()) +
        "-d here), so they cannot be joined; every rank must give rows of one shape, and have "
        "at least one sample (use fewer ranks than samples)");
  std::int64_t total = 0, offset = 0;
  for (std::int64_t r = 0; r < world; ++r) {
    const auto n = static_cast<std::int64_t>(h[r]);
    if (r < rank) offset += n;
    total += n;
  }
  std::vector<std::int64_t> shape(mine.sizes().begin(), mine.sizes().end());
  shape[0] = total;
  auto all = at::zeros(shape, at::kDouble);
  all.slice(0, offset, offset + mine.size(0)).copy_(mine.to(at::kCPU, at::kDouble));
  p_.ranks.all_reduce_sum(all);
  return all.to(mine.scalar_type());
}

void Trainer::probe_metrics() {
  impl_->eval.probe_metrics(impl_->valid_ds.get());  // metrics run in validation only
}

ValidResult Trainer::evaluate(Split split) {
  auto& I = *impl_;
  Dataset& ds = split_data(I, split);
  I.dp.join_if_needed();
  return I.eval.validation(&ds, std::string(to_string(split)) + "/");
}

at::Tensor Evaluator::prediction(Dataset& ds, const char* what, const ProgressFn& progress) {
  torch::NoGradGuard no_grad;
  p_.model->eval();
  p_.state.phase = Phase::valid;
  const std::int64_t n = ds.size();
  const at::Tensor order = valid_order(n, sharding());
  LoadPlan plan = eval_plan(ds, order, what);
  const std::int64_t batches = plan.end, mine = order.size(0);
  std::vector<at::Tensor> outs;
  std::int64_t done = 0;
  {
    BatchLoader loader(std::move(plan), p_.opt.num_workers);
    for (std::int64_t b = 0; b < batches; ++b) {
      p_.state.batch_idx = b;
      const std::int64_t m = loader.size_of(b);
      p_.state.batch_size = m;
      p_.events.set_where("predict");
      const auto& pred = p_.pass.run_batch(loader.take(b).batch, /*with_loss=*/false).pred;
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
  p_.model->train();
  p_.state.phase = Phase::train;
  at::Tensor rows = outs.empty() ? at::Tensor() : at::cat(outs);
  if (!p_.ranks.distributed()) return rows;
  // The shards are contiguous and in rank order (valid_order): joined, they are in order. A
  // rank without samples (fewer samples than ranks) joins too, so that all ranks stop alike.
  return join_rows(rows.defined() ? rows : at::empty({0}));
}

at::Tensor Trainer::predict(Split split, const ProgressFn& progress) {
  auto& I = *impl_;
  Dataset& ds = split_data(I, split);
  I.dp.join_if_needed();
  return I.eval.prediction(ds, split == Split::valid ? "the validation data" : "the training data",
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
    LoadPlan plan = I.eval.eval_plan(*own, at::zeros({1}, at::kLong), "the task's data");
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
  I.dp.join_if_needed();
  RowsDataset ds(rows);
  return I.eval.prediction(ds, "the input", progress);
}

void Evaluator::save_last_valid(StateDict& out) const {
  out.set_int("last_valid.samples", last_valid.samples);
  out.set_int("last_valid.values", static_cast<std::int64_t>(last_valid.values.size()));
  for (std::size_t i = 0; i < last_valid.values.size(); ++i) {
    out.set_string("last_valid.name." + std::to_string(i), last_valid.values[i].first);
    out.set_float("last_valid.value." + std::to_string(i), last_valid.values[i].second);
  }
}

void Evaluator::load_last_valid(const StateDict& in) {
  last_valid = {};
  if (!in.has("last_valid.values")) return;  // an older checkpoint
  const std::int64_t n = in.get_int("last_valid.values");
  if (n < 0 || n > 10000) throw std::runtime_error("loop state: bad validation value count");
  last_valid.samples = in.get_int("last_valid.samples");
  for (std::int64_t i = 0; i < n; ++i)
    last_valid.values.emplace_back(in.get_string("last_valid.name." + std::to_string(i)),
                                   in.get_float("last_valid.value." + std::to_string(i)));
}

}  // namespace wick
