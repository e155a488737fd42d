// The run's checkpoints (the CheckpointStore the Context forwards to): the parts a snapshot
// saves, a save (sharded optimizer state gathered to rank 0 for it), an inspection, and a
// restore with its checks that the checkpoint belongs to this run.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config_changes.hpp"
#include "loop/model_parts.hpp"
#include "loop/trainer_impl.hpp"

namespace wick {

namespace fs = std::filesystem;

namespace {

fs::path resolve(const Trainer::Impl& I, const std::string& folder) {
  fs::path p(folder);
  return p.is_absolute() ? p : fs::path(I.run.output_dir) / p;
}

// A position this run can continue from: inside its data (a batch index past the epoch's
// batches is a damaged or foreign checkpoint). Another training set, or a shorter
// steps_per_epoch, is no damage: refused (std::runtime_error, which `latest` does not skip),
// naming what differs, as the epoch's order or length is not the checkpoint's.
void check_position(const Trainer::Impl& I, const Manifest& m, const std::string& where) {
  const std::int64_t samples = I.train_ds->size();
  if (m.run.train_samples >= 0 && samples != kUnsized && m.run.train_samples != samples)
    throw std::runtime_error(
        where + " was written by a run whose training data held " +
        std::to_string(m.run.train_samples) + " samples; this run's holds " +
        std::to_string(samples) +
        ": each epoch's order is dealt over them, so the resume would skip some samples and see "
        "others twice. Resume with the checkpoint's data, or train afresh without --resume");
  // The epoch as the checkpoint's run dealt it (its world size and batch size, both >= 1 as
  // read_checkpoint checked).
  const std::int64_t nb = I.train_batches({m.dealt_from_batch, m.dealt_from_sample},
                                          m.run.world_size, m.run.batch_size, m.run.drop_last);
  if (m.position.batch > nb && m.run.steps_per_epoch >= 0 &&
      m.run.steps_per_epoch != I.opt.steps_per_epoch) {
    const auto then = m.run.steps_per_epoch;
    throw std::runtime_error(
        where + " is at batch " + std::to_string(m.position.batch) + " of epoch " +
        std::to_string(m.position.epoch) + ", past the " + std::to_string(nb) +
        " batches of this run's epochs (trainer.steps_per_epoch = " +
        std::to_string(I.opt.steps_per_epoch) + "; the checkpoint's run had " +
        (then == 0 ? std::string("none, its epochs the data's length") : std::to_string(then)) +
        "); " +
        (then == 0 ? std::string("leave trainer.steps_per_epoch unset")
                   : "set trainer.steps_per_epoch to " + std::to_string(then) + " or more") +
        " to continue it");
  }
  if (m.position.batch > nb)
    throw CheckpointError("its position (epoch " + std::to_string(m.position.epoch) + ", batch " +
                          std::to_string(m.position.batch) + ") is past the " + std::to_string(nb) +
                          " batches of an epoch of this run");
  if (m.micro_step < m.optimizer_step)
    throw CheckpointError("it counts more optimizer steps (" + std::to_string(m.optimizer_step) +
                          ") than batches (" + std::to_string(m.micro_step) + ")");
}

}  // namespace

SnapshotParts Trainer::Impl::snapshot_parts() {
  return {*model,
          optimizers,
          *task,
          *train_ds,
          loop.data_state,
          state,
          loop.pos,
          loop.epoch_start,
          {opt.seed, opt.batch_size, state.num_processes, opt.shuffle, opt.drop_last, run_id,
           at::get_num_threads(), state.grad_accum_steps,
           train_ds->size() == kUnsized ? -1 : train_ds->size(), opt.steps_per_epoch},
          records.count(),
          dispatch.stateful_hooks(),
          [this](StateDict& out) {
            epoch.save(out);
            // A resume at an epoch's last batch writes that epoch's record before any step.
            out.set_int("step_lrs", static_cast<std::int64_t>(step_lrs.size()));
            for (std::size_t i = 0; i < step_lrs.size(); ++i) {
              out.set_string("step_lr_key." + std::to_string(i), step_lrs[i].first);
              out.set_float("step_lr." + std::to_string(i), step_lrs[i].second);
            }
            // Only a checkpoint the fit ends with keeps a hook's stop request the loop has not
            // acted on yet. With several ranks, only at an epoch's end: mid-epoch the ranks
            // agree on a request a step later, a step the resume could not take.
            stops.save(out, stops.cancel && (!dp.distributed() || loop.pos.batch == 0));
            records.save_pending(out);
            eval.save_last_valid(out);
          },
          [this](const StateDict& in) {
            epoch.load(in, opt.batch_size);
            step_lrs.clear();  // a checkpoint without them: the lrs as the resume finds them
            const std::int64_t n = in.has("step_lrs") ? in.get_int("step_lrs") : 0;
            for (std::int64_t i = 0; i < n && i < 1000; ++i)
              step_lrs.emplace_back(in.get_string("step_lr_key." + std::to_string(i)),
                                    in.get_float("step_lr." + std::to_string(i)));
            stops.load(in);
            records.load_pending(in);
            eval.load_last_valid(in);
          },
          device.is_cuda(),
          run.config_toml};
}

namespace {

// Each optimizer's parameter groups by their sizes, "[4, 1]" (and "adam: [4]; sgd: [2]").
std::string group_layout(const std::vector<NamedOptimizer>& optimizers) {
  std::string out;
  for (const auto& o : optimizers) {
    if (!out.empty()) out += "; ";
    if (optimizers.size() > 1) out += o.name + ": ";
    std::string sizes;
    for (const auto& g : o.optimizer->param_groups())
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(g.params().size());
    out += "[" + sizes + "]";
  }
  return out;
}

}  // namespace

void Trainer::Impl::note_group_layout() {
  groups_at_start = group_layout(optimizers);
}

CheckpointInfo Trainer::Impl::save_checkpoint(const std::string& folder,
                                              const std::string& reason) {
  const auto dir = resolve(*this, folder);
  // Part of the step has run (its forward, a backward, an update): a resume from its position
  // would run the step again over that.
  if (in_step())
    throw std::logic_error("not saving checkpoint '" + dir.filename().string() + "' (" + reason +
                           "): a training step is under way, and a resume could not continue "
                           "it exactly; save between steps (before_step, after_step, "
                           "after_epoch)");
  // Weights that took steps from a non-finite loss are not a point to resume from: the last
  // checkpoint stays the last good one.
  if (steps.loss_check.failed())
    throw std::runtime_error("not saving checkpoint '" + dir.filename().string() + "' (" + reason +
                             "): the weights have taken steps since a non-finite loss");
  // Every rank comes here when the state is sharded (for the gather); otherwise rank 0 alone,
  // whose own read cannot see another rank's loss: the weights' check below does.
  steps.loss_check.verify(/*across_ranks=*/dp.sharded_state() != nullptr);
  auto parts = snapshot_parts();
  Manifest m = snapshot_manifest(parts, reason);
  // Sharded state is gathered to rank 0 for the save, and released after it (on every
  // process, whether rank 0's write succeeds or not).
  const auto whole = dp.whole(DataParallel::Whole::training_state);
  if (!state.is_main_process()) return checkpoint_info(dir, m, 0);  // replicas hold the same state
  // A resume builds the optimizer from the config and loads the state into its groups: state of
  // others could not be loaded. Said at the first save, not at a resume after a crash; on the
  // whole state (sharding splits the groups), which rank 0 holds now.
  if (const auto now = group_layout(optimizers); now != groups_at_start)
    throw std::runtime_error(
        "not saving checkpoint '" + dir.filename().string() + "' (" + reason +
        "): the optimizer's parameter groups changed during this fit (sizes " + groups_at_start +
        " when it started, " + now +
        " now: a hook changed them), and a resume, which builds the "
        "optimizer from the config, could not load its state; declare the groups in "
        "[[optimizer.groups]] (a group at lr 0 for a part that trains later) instead");
  // Nor, under nan_policy "error", are weights that are not finite: a step from another
  // rank's non-finite loss, which this rank reads only at the next record, or a step that
  // overflowed.
  if (const auto name = opt.nan_policy == NanPolicy::error ? first_non_finite(*model) : "";
      !name.empty())
    throw std::runtime_error("not saving checkpoint '" + dir.filename().string() + "' (" + reason +
                             "): parameter '" + name +
                             "' holds values that are not finite (a non-finite loss, on this "
                             "rank or another, or a step that overflowed)");
  // Rank 0 writes the records (after the gather above, which every rank joins).
  if (records.write_failed())
    throw std::runtime_error("not saving checkpoint '" + dir.filename().string() + "' (" + reason +
                             "): a record this run is past could not be written to "
                             "metrics.jsonl, and a resume from here would never write it");
  const auto bytes = write_checkpoint_folder(dir, m, snapshot_files(parts));
  note_progress(/*checkpoint=*/true);
  return checkpoint_info(dir, m, bytes);
}

CheckpointInfo Trainer::Impl::inspect_checkpoint(const std::string& folder) const {
  const auto dir = resolve(*this, folder);
  Files files;
  Manifest m = read_checkpoint(dir, &files);
  check_position(*this, m, "checkpoint '" + dir.string() + "'");
  check_agreement(m, files);
  std::uint64_t bytes = 0;
  for (const auto& f : files) bytes += f.second.size();
  return checkpoint_info(dir, m, bytes);
}

CheckpointInfo Trainer::Impl::restore_checkpoint(const std::string& folder) {
  if (loop.phase != LoopPhase::before_fit)
    throw std::logic_error("restore_checkpoint is only possible in before_fit");
  const auto dir = resolve(*this, folder);
  const auto where = "checkpoint '" + dir.string() + "'";
  Files files;
  Manifest m;
  try {
    m = read_checkpoint(dir, &files);
    check_position(*this, m, where);
    check_agreement(m, files);
  } catch (const CheckpointError& e) {
    throw CheckpointError("cannot resume from " + where + ": " + e.what());
  }
  // The data order is a function of (seed, epoch, shuffle): a resume with another of these
  // would not continue the same run.
  const RunIdentity now{opt.seed,    opt.batch_size, state.num_processes,
                        opt.shuffle, opt.drop_last,  run_id};
  std::string diff;
  auto cmp = [&](const char* key, auto then, auto mine) {
    if (then != mine)
      diff += "\n  " + std::string(key) + ": checkpoint " + std::to_string(then) + ", this run " +
              std::to_string(mine);
  };
  cmp("seed", m.run.seed, now.seed);
  cmp("shuffle", m.run.shuffle, now.shuffle);
  cmp("drop_last", m.run.drop_last, now.drop_last);
  const bool regeared = m.run.world_size != now.world_size || m.run.batch_size != now.batch_size;
  if (regeared && streaming()) {
    cmp("batch_size", m.run.batch_size, now.batch_size);
    cmp("world_size", m.run.world_size, now.world_size);
    diff += "\n  (a stream's samples are numbered by world size and batch size)";
  }
  if (!diff.empty())
    throw std::runtime_error(where + " was written by a run with other settings:" + diff +
                             "\na resume must use the checkpoint's seed, shuffle and drop_last" +
                             (regeared && streaming() ? ", and on a stream its batch size and "
                                                        "world size"
                                                      : "") +
                             " (they fix the data order)");
  if (m.position.epoch > opt.epochs)
    throw std::runtime_error(where + " is at epoch " + std::to_string(m.position.epoch) +
                             ", past this run's trainer.epochs = " + std::to_string(opt.epochs) +
                             "; raise trainer.epochs to continue it");
  auto parts = snapshot_parts();
  const Restored restored = restore_files(parts, m, files, where);
  if (!restored.optimizer_changes.empty() && state.is_main_process())
    std::fprintf(stderr,
                 "wick: resuming %s with optimizer settings this config gives otherwise than "
                 "its run did; the config's are taken (a schedule goes on from its position):%s\n",
                 where.c_str(), restored.optimizer_changes.c_str());
  if (state.is_main_process() && !restored.config_toml.empty() && !run.config_toml.empty()) {
    std::string lines;
    for (const auto& c : config_changes(restored.config_toml, run.config_toml)) lines += "\n  " + c;
    if (!lines.empty())
      std::fprintf(stderr,
                   "wick: note: resuming %s with a task or hooks configured otherwise than its "
                   "run's; this config's are taken (where they change training, the run no "
                   "longer continues as the interrupted one would have):%s\n",
                   where.c_str(), lines.c_str());
  }
  // The run continues its own metrics history from the checkpoint: records a killed run
  // wrote after it are dropped from metrics.jsonl and from every sink that rewinds, once
  // before_fit is over (every sink is set up by then).
  if (!m.run.id.empty()) run_id = m.run.id;  // the run goes on under its own name
  // "auto" continues on the checkpoint's thread count (on the same ranks), unless the user
  // names one in OMP_NUM_THREADS: the steps then round as the uninterrupted run's would.
  if (opt.auto_threads && m.run.threads > 0 && !regeared && threads_why != "OMP_NUM_THREADS" &&
      m.run.threads != at::get_num_threads()) {
    at::set_num_threads(static_cast<int>(m.run.threads));
    threads_why = "the checkpoint's count";
  } else if (m.run.threads > 0 && m.run.threads != at::get_num_threads() && !regeared &&
             state.is_main_process()) {
    // Sums split over another count of threads round otherwise: the run goes on, not
    // bit-identically to the uninterrupted one.
    std::fprintf(stderr,
                 "wick: note: %s was trained on %lld thread(s), this run on %d (%s): the "
                 "values will differ from an uninterrupted run's in their last bits\n",
                 where.c_str(), static_cast<long long>(m.run.threads), at::get_num_threads(),
                 opt.auto_threads ? ("auto: " + threads_why).c_str() : "trainer.threads");
  }
  loop.resume.restored(m.position, m.records, m.run.grad_accum_steps);
  loop.pos = m.position;
  loop.epoch_start = {m.dealt_from_batch, m.dealt_from_sample};
  if (regeared) {
    std::string rest;
    if (m.position.batch > 0) {
      // The rest of the epoch: exactly the samples of its order not yet seen, dealt to this
      // run's ranks at its batch size.
      const std::int64_t n = train_ds->size();
      const std::int64_t seen =
          order_consumed(n, loop.epoch_start, m.position.batch, m.run.world_size, m.run.batch_size);
      loop.epoch_start = {m.position.batch, seen};
      rest = "; the " + std::to_string(n - seen) + " samples of epoch " +
             std::to_string(m.position.epoch) + " not yet seen are dealt anew";
    }
    if (state.is_main_process())
      std::fprintf(stderr,
                   "wick: resuming a checkpoint of %lld rank(s) x batch %lld on %lld rank(s) x "
                   "batch %lld (global batch %lld -> %lld)%s\n",
                   static_cast<long long>(m.run.world_size),
                   static_cast<long long>(m.run.batch_size), static_cast<long long>(now.world_size),
                   static_cast<long long>(now.batch_size),
                   static_cast<long long>(m.run.world_size * m.run.batch_size),
                   static_cast<long long>(now.world_size * now.batch_size), rest.c_str());
  }
  std::uint64_t bytes = 0;
  for (const auto& f : files) bytes += f.second.size();
  return checkpoint_info(dir, m, bytes);
}

void Trainer::Impl::check_resumed_accumulation() const {
  const std::int64_t then = loop.resume.accumulation(), now = state.grad_accum_steps;
  if (!loop.resume.resumed() || then == 0 || then == now) return;
  const auto& at = loop.resume.start();
  const std::string where = "the checkpoint restored (epoch " + std::to_string(at.epoch) +
                            ", batch " + std::to_string(at.batch) + ")";
  // Windows begin at multiples of the count within an epoch; a checkpoint inside one holds
  // its first micro-batches' gradients, each scaled by 1 / its run's count.
  if (at.batch % then != 0 || at.batch % now != 0)
    throw std::runtime_error(
        where + " was written by a run accumulating " + std::to_string(then) +
        " micro-batches per optimizer step, and this run accumulates " + std::to_string(now) +
        " (hooks.grad_accum.steps): batch " + std::to_string(at.batch) +
        " is not where both runs' windows begin (at multiples of the count in an epoch), so the "
        "resumed window's gradients would be scaled for micro-batches it does not hold; resume "
        "with hooks.grad_accum.steps = " +
        std::to_string(then) +
        ", or change it from a checkpoint at an epoch's start (ckpt-eNNNN-b0000000)");
  if (state.is_main_process())
    std::fprintf(stderr,
                 "wick: resuming %s, written by a run accumulating %lld micro-batches per "
                 "optimizer step, with %lld: a step now takes %lld samples per rank (it took "
                 "%lld); a step-based lr_schedule keeps the total steps it worked out at the "
                 "first start unless total_steps is set\n",
                 where.c_str(), static_cast<long long>(then), static_cast<long long>(now),
                 static_cast<long long>(now * opt.batch_size),
                 static_cast<long long>(then * opt.batch_size));
}

}  // namespace wick
