// The run's outputs: the run folder's lock, the metrics records (step and epoch records, the
// training means over the ranks, learning rates, FLOP rates) and summary.json.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <utility>

#include "loop/crash_report.hpp"
#include "loop/trainer_impl.hpp"
#include "wick/outputs.hpp"
#include "wick/system.hpp"

namespace wick {

namespace fs = std::filesystem;

double Trainer::Impl::current_lr() const {
  const auto& groups = optimizers.front().optimizer->param_groups();
  return groups.empty() ? 0.0 : groups[0].options().get_lr();
}

// "lr": the first group's of the first optimizer; with several optimizers also "lr/NAME".
// Written over `out` in place: once a step, with no allocation after the first.
void Trainer::Impl::lrs_into(std::vector<std::pair<std::string, double>>& out) const {
  std::size_t n = 0;
  auto put = [&](const char* key, const std::string& name, double lr) {
    if (n == out.size()) out.emplace_back();
    out[n].first.assign(key).append(name);
    out[n++].second = lr;
  };
  put("lr", "", current_lr());
  if (optimizers.size() > 1)
    for (const auto& o : optimizers) {
      const auto& groups = o.optimizer->param_groups();
      if (!groups.empty()) put("lr/", o.name, groups[0].options().get_lr());
    }
  out.resize(n);
}

// The lrs the last step trained with: a schedule sets the next step's at after_step, before
// an epoch's record is written. Before this run's first step, the lrs as they are.
void Trainer::Impl::add_lrs(Record& r) const {
  std::vector<std::pair<std::string, double>> now;
  if (step_lrs.empty()) lrs_into(now);
  const auto& lrs = step_lrs.empty() ? now : step_lrs;
  r.values.insert(r.values.end(), lrs.begin(), lrs.end());
}

std::vector<std::pair<std::string, double>> Trainer::Impl::train_means(bool whole_epoch) {
  // [sum, samples] per value, each batch's mean weighed by its samples: the loss, then each
  // training metric; one all-reduce for all.
  std::vector<at::Tensor> parts;
  auto add = [&](const std::vector<at::Tensor>& v, const std::vector<double>& samples,
                 std::size_t from) {
    if (from >= v.size()) {
      parts.push_back(torch::zeros({2}, torch::kDouble));
      return;
    }
    auto part = at::TensorList(v).slice(from);
    // A resumed epoch's values from the checkpoint may sit on another device than the run's
    // new ones (a CPU run's checkpoint resumed on a GPU): those come first, so the ends tell.
    // Moved copies only then: a record otherwise stacks the values where they are.
    std::vector<at::Tensor> moved;
    if (part.front().device() != part.back().device()) {
      for (const auto& t : part) moved.push_back(t.to(part.back().device()));
      part = moved;
    }
    // On the host: a record reads its values there anyway.
    const std::vector<double> w(samples.begin() + static_cast<std::ptrdiff_t>(from), samples.end());
    const auto s = (torch::stack(part).to(torch::kDouble).cpu().reshape({-1}) *
                    torch::tensor(at::ArrayRef<double>(w), torch::kDouble))
                       .sum();
    double n = 0;
    for (double x : w) n += x;
    parts.push_back(torch::stack({s, torch::scalar_tensor(n, torch::kDouble)}));
  };
  add(epoch.losses, epoch.loss_samples, whole_epoch ? 0 : epoch.logged_loss);
  for (std::size_t k = 0; k < epoch.names.size(); ++k)
    add(epoch.metrics[k], epoch.metric_samples[k], whole_epoch ? 0 : epoch.logged_metric[k]);
  auto packed = torch::cat(parts);
  dp.all_reduce_sum(packed);
  auto a = packed.accessor<double, 1>();
  std::vector<std::pair<std::string, double>> out;
  if (a[1] > 0) out.emplace_back("train/loss", a[0] / a[1]);
  for (std::size_t k = 0; k < epoch.names.size(); ++k) {
    const auto i = static_cast<std::int64_t>(2 * (k + 1));
    if (a[i + 1] > 0) out.emplace_back("train/" + epoch.names[k], a[i] / a[i + 1]);
  }
  return out;
}

void Trainer::Impl::log_step_if_due() {
  // Accumulating, a record waits for the end of the window (windows begin at multiples of the
  // count within an epoch) in which the count of batches reached a multiple of log_every: no
  // two records share an optimizer step, and each holds whole windows.
  lrs_into(step_lrs);
  const std::int64_t L = opt.log_every;
  if (L <= 0 || epoch.losses.size() <= epoch.logged_loss || !state.is_accum_boundary()) return;
  const std::int64_t window = std::min(state.accum_window(), state.micro_step);
  if (state.micro_step / L == (state.micro_step - window) / L) return;
  steps.loss_check.verify();  // a record is a point where the losses are read anyway
  Record r;
  r.kind = Record::Kind::step;
  r.values = train_means(/*whole_epoch=*/false);
  add_lrs(r);
  flops.add_window_rates(r, state.micro_step, state.num_processes);
  epoch.mark_logged();
  r.epoch = state.epoch;
  r.step = state.optimizer_step;
  r.samples_seen = state.samples_seen;
  r.time_s = seconds_since(times.fit_start);
  records.write(std::move(r));
}

void Trainer::Impl::write_epoch_record(const EpochClock& start) {
  Record r;
  r.kind = Record::Kind::epoch;
  r.values = train_means(/*whole_epoch=*/true);
  for (const auto& kv : eval.last_valid.values) r.values.push_back(kv);
  add_lrs(r);
  const double dt = seconds_since(start.t) - (flops.probe_seconds() - start.probe_s);
  r.values.emplace_back("epoch_time_s", dt);
  r.values.emplace_back(
      "samples_per_s",
      dt > 0 ? static_cast<double>(times.samples_this_run - start.samples) / dt : 0.0);
  flops.add_rates(r, state.micro_step - times.epoch_micro0, times.epoch_train_s,
                  state.num_processes);
  r.values.emplace_back("peak_rss_mb", peak_rss_mb());
  r.epoch = state.epoch;
  r.step = state.optimizer_step;
  r.samples_seen = state.samples_seen;
  r.time_s = seconds_since(times.fit_start);
  records.stage(std::move(r));
}

void Trainer::Impl::close_records() {
  records.commit();
  if (!records.has_pending()) return;
  Record r;
  r.kind = Record::Kind::step;
  r.epoch = state.epoch;
  r.step = state.optimizer_step;
  r.samples_seen = state.samples_seen;
  r.time_s = seconds_since(times.fit_start);
  records.write(std::move(r));
  end_values = records.last().values;
}

bool Trainer::Impl::writes_outputs() const {
  // Data-parallel ranks share the run directory; rank 0 writes it (the metrics are reduced).
  return opt.write_outputs && !run.output_dir.empty() && state.rank == 0;
}

void Trainer::Impl::lock_outputs() {
  if (!writes_outputs()) return;
  const fs::path dir(run.output_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("cannot create output_dir '" + dir.string() + "': " + ec.message() +
                             "; set trainer.output_dir to a writable folder");
  lock.acquire(dir);
}

void Trainer::Impl::open_outputs() {
  if (!writes_outputs()) return;
  const fs::path dir(run.output_dir);
  // A resumed run appends to the history it continues (cut back to its checkpoint when the
  // checkpoint is restored); a new run starts it afresh.
  records.open(dir / "metrics.jsonl", /*append=*/!run.resume.empty());
}

// What summary.json says now: "running" (res null) or how the fit ended.
Summary Trainer::Impl::summary_now(const FitResult* res) {
  Summary s;
  s.status = res ? to_string(res->status) : "running";
  if (res) {
    s.error = res->error;
    s.stop_reason = res->stop_reason;
  }
  // Whole epochs, as the position counts them: a fit stopped mid-epoch (max_steps, a signal)
  // has not finished the one it was in; one stopped after an epoch's validation has. A resume
  // past the configured epochs counts those.
  s.epochs = std::min(loop.pos.epoch, opt.epochs);
  s.optimizer_steps = state.optimizer_step;
  s.micro_steps = state.micro_step;
  s.samples_seen = state.samples_seen;
  s.skipped_steps = state.skipped_steps;
  s.cancelled_steps = stops.cancelled_steps;
  s.cancelled_epochs = stops.cancelled_epochs;
  s.num_processes = state.num_processes;
  s.wall_s = seconds_since(times.fit_start);
  s.train_samples_per_s = times.train_seconds > 0
                              ? static_cast<double>(times.samples_this_run) / times.train_seconds
                              : 0.0;
  s.valid = eval.last_valid.values;
  s.logged = end_values;
  s.train_cpu_s = times.train_cpu_seconds;
  if (res) {
    s.model_fingerprint = self->model_fingerprint();
    if (!res->model_file.empty()) s.model_file = fs::path(res->model_file).filename().string();
    s.model_weights = res->model_weights;
  }
  s.config = run.config_path;
  s.overrides = opt.overrides;
  s.flops_per_step = flops.per_step();
  s.peak_gflops = flops.peak_gflops();
  s.batch_size = opt.batch_size;
  s.threads = at::get_num_threads();
  s.threads_from = opt.auto_threads  ? "auto: " + threads_why
                   : opt.threads > 0 ? std::string("trainer.threads")
                                     : std::string("LibTorch's default");
  s.batch_size_search = opt.batch_size_search;
  s.start_to_first_step_s = times.first_step_s;
  if (Profiler* p = dispatch.profiler()) {
    s.profile_json = profile_json(p->snapshot(s.wall_s));
    s.memory_json = memory_json(p->memory.snapshot());
  }
  return s;
}

// summary.json says "running" from the start of a fit, so that a run that dies (a crash, a
// kill) never leaves an earlier run's "completed" behind; the end writes the truth.
void Trainer::Impl::write_summary_file(const FitResult* res) {
  // Not into a folder another fit holds.
  if (!writes_outputs() || !lock.held()) return;
  Summary s = summary_now(res);
  write_summary(fs::path(run.output_dir) / "summary.json", s);
  if (res) {
    CrashReportScope::disarm_summary();
  } else {
    times.summary_written = Clock::now();
    arm_crash_summary(std::move(s));
  }
}

void Trainer::Impl::note_progress(bool checkpoint) {
  // An epoch's end rewrites the file at most every 10 s (each write is two fsyncs); a failed
  // write keeps the one before, which still says "running".
  if (checkpoint || seconds_since(times.summary_written) >= 10) {
    try {
      write_summary_file(nullptr);
      return;
    } catch (const std::exception&) {
    }
  }
  arm_crash_summary();
}

// Until the end writes the truth, a crash (or a process's exit) writes "failed" with what it
// found, and the counts as of the last epoch's end or checkpoint.
void Trainer::Impl::arm_crash_summary(std::optional<Summary> now) {
  if (!writes_outputs() || !lock.held()) return;
  Summary s = now ? std::move(*now) : summary_now(nullptr);
  constexpr std::string_view kMarker = "@wick-crash-report@";
  s.status = "failed";
  s.error = kMarker;
  CrashReportScope::arm_summary(fs::path(run.output_dir) / "summary.json", summary_json(s),
                                kMarker);
}

}  // namespace wick
