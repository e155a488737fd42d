// Checkpoint policy: when to save (periodically, on cancel, on failure, at the end, the best
// by a metric), where, which to keep, and resume (`wick fit CONFIG --resume
// latest|best|auto|PATH`). What a checkpoint holds and how it is written and read is the
// framework's (Context:: save_checkpoint / inspect_checkpoint / restore_checkpoint,
// wick/checkpoint.hpp).
//
// Folders are checkpoints/ckpt-eEEEE-bBBBBBB (epoch, batches of it done), and checkpoints/best.
// Saves are taken between steps, after every hook has finished the step: a save that falls
// due at after_step / after_epoch is written at the next before_step / before_valid /
// before_epoch / after_fit / after_cancel, whichever comes first. The checkpoint hook runs
// at order -100, first of the built-ins but swa (-110), so it restores before the other hooks'
// before_fit.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <wick/wick.hpp>

namespace {

namespace fs = std::filesystem;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

class Checkpoint : public wick::Hook {
 public:
  explicit Checkpoint(const wick::Params& p)
      : dir_param_(p.get_string("dir")),
        every_n_steps_(p.get_int("every_n_steps")),
        every_n_epochs_(p.get_int("every_n_epochs")),
        keep_last_(p.get_int("keep_last")),
        keep_superseded_(p.get_int("keep_superseded")),
        on_cancel_(p.get_bool("on_cancel")),
        on_failure_(p.get_bool("on_failure")),
        at_end_(p.get_bool("at_end")),
        monitor_(p.get_string("monitor")),
        mode_(p.get_string("mode")) {
    if (every_n_steps_ < 0) throw p.error("every_n_steps", "must be >= 0 (0: never)");
    if (every_n_epochs_ < 0) throw p.error("every_n_epochs", "must be >= 0 (0: never)");
    if (keep_last_ < 0) throw p.error("keep_last", "must be >= 0 (0: keep all)");
    if (keep_superseded_ < 0) throw p.error("keep_superseded", "must be >= 0 (0: keep all)");
  }

  void connect(wick::Registrar& r) override {
    using wick::Point;
    r.on(Point::before_fit, [this](wick::Context& c) { before_fit(c); });
    r.on(Point::before_epoch, [this](wick::Context& c) { flush(c); });
    r.on(Point::before_step, [this](wick::Context& c) {
      if (c.state().training()) flush(c);
    });
    r.on(Point::after_step, [this](wick::Context& c) {
      const auto& s = c.state();
      if (s.training() && every_n_steps_ > 0 && s.stepped && s.optimizer_step % every_n_steps_ == 0)
        due_ = "step";
    });
    r.on(Point::before_valid, [this](wick::Context& c) { flush(c); });
    r.on(Point::after_epoch, [this](wick::Context& c) { after_epoch(c); });
    // The folder is let go when the fit ends, however the last save went.
    struct Unlock {
      std::shared_ptr<void>& lock;
      ~Unlock() { lock.reset(); }
    };
    r.on(Point::after_fit, [this](wick::Context& c) {
      Unlock unlock{lock_};
      flush(c);
      if (at_end_) save(c, "end");
    });
    r.on(Point::after_cancel, [this](wick::Context& c) {
      Unlock unlock{lock_};
      after_cancel(c);
    });
  }

  // The best value so far travels with the checkpoints, so a resumed run keeps comparing.
  bool has_state() const override { return true; }
  void save_state(wick::StateDict& out) const override {
    out.set_int("has_best", has_best_ ? 1 : 0);
    out.set_float("best", best_);
  }
  void load_state(const wick::StateDict& in) override {
    has_best_ = in.get_int("has_best") != 0;
    best_ = in.get_float("best");
  }

 private:
  static std::string name_of(wick::Position p) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "ckpt-e%04lld-b%07lld", static_cast<long long>(p.epoch),
                  static_cast<long long>(p.batch));
    return buf;
  }

  // ---- start and resume -------------------------------------------------------------------

  void before_fit(wick::Context& c) {
    ready_ = false;
    save_failed_ = false;
    due_.clear();
    best_due_ = false;
    has_best_ = false;  // a resume restores these
    best_ = 0;
    last_saved_.clear();
    resumed_at_.clear();
    const auto& run = c.run();
    fs::path d = dir_param_.empty() ? fs::path("checkpoints") : fs::path(dir_param_);
    dir_ = d.is_absolute() ? d : fs::path(run.output_dir) / d;
    if (run.is_main_process()) check_writable(run);
    const bool resumed = !run.resume.empty() && resume(c, run.resume);
    // Set aside at the first save, not now: a fit that fails before it saves anything (a
    // hook's check in before_fit) leaves the earlier run's checkpoints where they were.
    supersede_ =
        run.is_main_process() ? (resumed ? Supersede::later : Supersede::all) : Supersede::none;
    start_ = name_of(c.position());
    ready_ = true;
  }

  // Two runs saving into one folder would set each other's checkpoints aside and resume from
  // the other's. The output folder is the fit's own lock; a folder elsewhere gets its own.
  void lock_folder(const wick::RunInfo& run) {
    std::error_code e1, e2;
    if (fs::weakly_canonical(dir_, e1) == fs::weakly_canonical(run.output_dir, e2) && !e1 && !e2)
      return;
    lock_ = wick::lock_folder(dir_.string(), "checkpoint folder",
                              "give each run its own hooks.checkpoint.dir");
  }

  // Fails at start, before any training, when checkpoints could not be written or another
  // run writes them (locked before its leftovers are touched).
  void check_writable(const wick::RunInfo& run) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec)
      throw std::runtime_error("cannot create the checkpoint folder '" + dir_.string() +
                               "': " + ec.message() + "; make it writable or set " +
                               "hooks.checkpoint.dir to a writable folder");
    // As deep as a save writes (.tmp-ckpt-eEEEE-bBBBBBBB-PID/manifest.json.tmp, a character
    // to spare): a path past the system's limit fails here, not at the first save an epoch in.
    const auto probe = dir_ / (".probe-" + name_of({}) + "-" + std::to_string(::getpid()));
    const auto file = probe / "manifest.json.tmp";
    fs::remove_all(probe, ec);  // one a process of this pid left (pid 1 in a container)
    fs::create_directory(probe, ec);
    int fd = ec ? -1 : ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 && !ec) ec.assign(errno, std::generic_category());
    if (fd >= 0) ::close(fd);
    std::error_code ignored;
    fs::remove_all(probe, ignored);
    if (ec)
      throw std::runtime_error("the checkpoint folder '" + dir_.string() +
                               "' cannot hold a checkpoint: " + ec.message() +
                               "; make it writable or set hooks.checkpoint.dir to a writable "
                               "folder with a shorter path");
    lock_folder(run);
    // Leftovers of a save that was interrupted, .tmp-NAME-PID and .old-NAME-PID. A .tmp- folder
    // is unfinished. An .old- folder is checkpoint NAME moved aside for its replacement:
    // dropped once the replacement is in place, else put back (a kill between the two
    // renames). A live process's are its save in progress (another run sharing this folder):
    // left alone.
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      const auto n = e.path().filename().string();
      const bool tmp = n.rfind(".tmp-", 0) == 0, old = n.rfind(".old-", 0) == 0;
      const auto dash = n.rfind('-');
      if ((!tmp && !old) || dash <= 5 || saving_process_alive(n.substr(dash + 1))) continue;
      const auto name = n.substr(5, dash - 5);
      const bool drop = tmp || fs::exists(dir_ / name, ec);
      std::error_code fail;
      if (drop)
        fs::remove_all(e.path(), fail);
      else
        fs::rename(e.path(), dir_ / name, fail);
      if (fail)
        std::fprintf(stderr, "wick: checkpoint: could not %s the leftover '%s': %s\n",
                     drop ? "remove" : "restore", e.path().c_str(), fail.message().c_str());
    }
  }

  // Whether the process of a leftover's PID is another one that still runs.
  static bool saving_process_alive(const std::string& pid_text) {
    if (pid_text.empty() || pid_text.size() > 9 ||
        pid_text.find_first_not_of("0123456789") != std::string::npos)
      return false;
    const auto pid = static_cast<pid_t>(std::stol(pid_text));
    return pid > 0 && pid != ::getpid() && (::kill(pid, 0) == 0 || errno == EPERM);
  }

  // Checkpoints of another timeline (an earlier fresh run, or the part of this run after an
  // older checkpoint it was resumed from) would be taken by `--resume latest` and would push
  // this run's own out of keep_last: they are moved aside (removed only past keep_superseded,
  // once this run has a checkpoint of its own).
  void supersede_later(bool fresh) {
    std::vector<fs::path> later;
    for (const auto& p : list_checkpoints())
      if (fresh || p.filename().string() > resumed_at_) later.push_back(p);
    std::error_code ec;
    if (fresh && fs::exists(dir_ / "best", ec)) later.push_back(dir_ / "best");
    if (later.empty()) return;
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
    // A folder of its own: two fresh fits of one process (a host's) can start in one second.
    const auto base = "superseded-" + std::string(stamp) + "-" + std::to_string(::getpid());
    fs::path aside = dir_ / base;
    for (int k = 2; !fs::create_directory(aside, ec); ++k) {
      if (ec || k > 1000)
        throw std::runtime_error("cannot make a folder to set checkpoints aside in, '" +
                                 aside.string() + "': " + (ec ? ec.message() : "it exists") +
                                 "; free the checkpoint folder or set hooks.checkpoint.dir");
      aside = dir_ / (base + "-" + std::to_string(k));
    }
    for (const auto& p : later) {
      fs::rename(p, aside / p.filename(), ec);
      // Left in place, a checkpoint of the other timeline would be resumed from.
      if (ec) {
        std::error_code ignored;
        fs::remove(aside, ignored);  // only if nothing went into it
        throw std::runtime_error("cannot move the checkpoint '" + p.string() + "' aside to '" +
                                 aside.string() + "': " + ec.message() +
                                 "; move or remove it, then start the fit again");
      }
    }
    std::fprintf(stderr,
                 "wick: note: moved %zu checkpoint(s) of %s aside to '%s'; --resume latest and "
                 "keep_last ignore them\n",
                 later.size(), fresh ? "an earlier run" : "the abandoned later part of this run",
                 aside.c_str());
    bound_due_ = true;
  }

  // The folders of set-aside checkpoints: each fresh fit into a folder (and each resume from
  // an earlier point) adds one. After this run's first save, the oldest beyond
  // keep_superseded are removed (one that cannot be is warned of and kept); with all kept,
  // their number and size are said once there is more than one, as they grow without bound.
  void bound_superseded() {
    std::vector<std::pair<fs::file_time_type, fs::path>> aside;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (e.is_directory(ec) && e.path().filename().string().rfind("superseded-", 0) == 0)
        aside.emplace_back(fs::last_write_time(e.path(), ec), e.path());
    std::sort(aside.begin(), aside.end());  // oldest first: by when each was filled
    std::size_t removed = 0;
    while (keep_superseded_ > 0 && aside.size() > static_cast<std::size_t>(keep_superseded_)) {
      fs::remove_all(aside.front().second, ec);
      if (ec)
        std::fprintf(stderr,
                     "wick: warning: cannot remove the set-aside checkpoints '%s' "
                     "(hooks.checkpoint.keep_superseded = %lld): %s\n",
                     aside.front().second.c_str(), static_cast<long long>(keep_superseded_),
                     ec.message().c_str());
      else
        ++removed;
      aside.erase(aside.begin());
    }
    if (removed > 0)
      std::fprintf(stderr,
                   "wick: note: removed the %zu oldest folder(s) of set-aside checkpoints "
                   "(hooks.checkpoint.keep_superseded = %lld)\n",
                   removed, static_cast<long long>(keep_superseded_));
    if (keep_superseded_ > 0 || aside.size() < 2) return;
    std::uintmax_t bytes = 0;
    for (const auto& a : aside)
      for (const auto& f : fs::recursive_directory_iterator(a.second, ec))
        if (f.is_regular_file(ec)) bytes += f.file_size(ec);
    std::fprintf(stderr,
                 "wick: note: %zu folders of set-aside checkpoints (superseded-...) hold %.1f MB "
                 "in '%s'; remove those no longer needed, or set "
                 "hooks.checkpoint.keep_superseded to keep the newest few\n",
                 aside.size(), static_cast<double>(bytes) / 1e6, dir_.c_str());
  }

  std::vector<fs::path> list_checkpoints() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (e.path().filename().string().rfind("ckpt-", 0) == 0) out.push_back(e.path());
    // Zero-padded names: lexical order is (epoch, batch) order.
    std::sort(out.begin(), out.end());
    return out;
  }

  // The folder `what` names: "latest" is the newest valid checkpoint (damaged or unfinished
  // ones are skipped with the reason), "auto" the same or "" when there is none at all, "best" the
  // folder's best, anything else a path (as given, or in the folder).
  fs::path find(wick::Context& c, const std::string& what) const {
    std::error_code ec;
    if (what == "best") {
      if (!fs::exists(dir_ / "best", ec))
        throw std::runtime_error("--resume best: no '" + (dir_ / "best").string() +
                                 "'; it is saved when hooks.checkpoint.monitor is set (use "
                                 "--resume latest)");
      return fs::absolute(dir_ / "best");
    }
    if (what != "latest" && what != "auto") {
      fs::path p(what);
      if (!fs::exists(p, ec) && fs::exists(dir_ / p, ec)) p = dir_ / p;
      return fs::absolute(p);
    }
    auto all = list_checkpoints();
    std::size_t skipped = 0;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      try {
        c.inspect_checkpoint(it->string());
        return *it;
      } catch (const wick::CheckpointError& e) {
        std::fprintf(stderr, "wick: warning: skipping checkpoint '%s': %s\n", it->c_str(),
                     e.what());
        ++skipped;
      }
    }
    // "auto" starts afresh where no checkpoint was written yet; damaged ones are refused as
    // "latest" refuses them, or the run's training would be dropped without a word.
    if (what == "auto" && skipped == 0) return {};
    throw std::runtime_error(
        "--resume " + what + ": no valid checkpoint in '" + dir_.string() + "'" +
        (skipped == 0 ? std::string(" (it has none)")
                      : " (" + std::to_string(skipped) + " skipped as unusable)") +
        "; run without --resume to start afresh");
  }

  // False when "auto" found nothing to resume from (the trainer then starts afresh).
  bool resume(wick::Context& c, const std::string& what) {
    const auto t0 = Clock::now();
    const auto dir = find(c, what);
    if (dir.empty()) return false;
    const auto info = c.restore_checkpoint(dir.string());
    last_saved_ = dir.filename().string();
    resumed_at_ = name_of(info.position);  // best, or a folder elsewhere: by its position
    std::printf("wick: resumed from %s (epoch %lld, batch %lld, optimizer step %lld) in %.1f ms\n",
                info.path.c_str(), static_cast<long long>(info.position.epoch),
                static_cast<long long>(info.position.batch),
                static_cast<long long>(info.optimizer_step), ms_since(t0));
    std::fflush(stdout);
    return true;
  }

  // ---- saving -----------------------------------------------------------------------------

  void after_epoch(wick::Context& c) {
    const auto& s = c.state();
    if (every_n_epochs_ > 0 && (s.epoch + 1) % every_n_epochs_ == 0) due_ = "epoch";
    if (monitor_.empty()) return;
    const auto& rec = c.last_record();
    const double* v = nullptr;
    std::string have;
    for (const auto& [k, x] : rec.values) {
      if (k == monitor_) v = &x;
      have += (have.empty() ? "" : ", ") + k;
    }
    if (!v)
      throw std::runtime_error("hooks.checkpoint.monitor = \"" + monitor_ +
                               "\" is not in the epoch record; it has: " + have);
    if (std::isfinite(*v) && (!has_best_ || (mode_ == "min" ? *v < best_ : *v > best_))) {
      best_ = *v;
      has_best_ = true;
      best_due_ = true;
    }
  }

  void after_cancel(wick::Context& c) {
    const auto* why = c.cancellation();
    if (!why || !why->ends_fit() || !ready_) return;  // a step or epoch, or a failed start
    const bool failed = why->reason == wick::CancelReason::failure;
    if (failed ? !on_failure_ : !on_cancel_) {
      flush(c, false);
      return;
    }
    // Said by rank 0, which writes the checkpoints and knows which it wrote.
    const bool says = c.run().is_main_process();
    if (name_of(c.position()) == start_) {
      // Nothing trained since the fit started: the weights are the initial ones, or the
      // checkpoint's this fit resumed from. Saving them would set the earlier run aside.
      if (says)
        std::fprintf(stderr,
                     "wick: checkpoint: not saving on %s: nothing was trained since the fit "
                     "started\n",
                     failed ? "failure" : "cancel");
      return;
    }
    if (!c.between_steps()) {
      // Part of the step may have run (gradients, an optimizer update), or validation may have
      // swapped other weights in (EMA): not a point a resume could continue from exactly.
      if (says)
        std::fprintf(stderr,
                     "wick: checkpoint: not saving on %s: it came in the middle of a %s; "
                     "the last checkpoint is %s\n",
                     failed ? "failure" : "cancel", c.state().validating() ? "validation" : "step",
                     last_saved_.empty() ? "(none)" : (dir_ / last_saved_).c_str());
      return;
    }
    flush(c, false);
    save(c, failed ? "failure" : "cancel");
  }

  void flush(wick::Context& c, bool sync = true) {
    const bool periodic = !due_.empty();  // the same on every rank (step and epoch counts)
    // best first: a checkpoint after it holds the best value it was written for, so a run
    // killed between the two resumes from an earlier one and writes best again.
    if (best_due_) {
      best_due_ = false;
      write(c, "best", "best");
    }
    if (!due_.empty()) {
      auto why = std::move(due_);
      due_.clear();
      save(c, why);
    }
    // Data-parallel: rank 0 writes, every rank waits here until it has (no-op in one process).
    // Not on the way out of a failed fit, where a peer may be gone.
    if (periodic && sync) c.barrier();
  }

  void save(wick::Context& c, const std::string& reason) {
    const auto name = name_of(c.position());
    if (name == last_saved_) return;  // this very position is saved already
    if (!c.run().is_main_process()) {
      last_saved_ = name;  // rank 0 writes, prunes and reports; the folder is shared
      write(c, name, reason);
      return;
    }
    const auto t0 = Clock::now();
    const auto bytes = write(c, name, reason);
    if (!bytes) return;
    last_saved_ = name;
    prune();
    if (bound_due_) {
      bound_due_ = false;
      bound_superseded();
    }
    if (reason != "step" && reason != "epoch") {
      std::printf("wick: checkpoint (%s) saved: %s (%.2f MB in %.1f ms)\n", reason.c_str(),
                  (dir_ / name).c_str(), static_cast<double>(*bytes) / 1e6, ms_since(t0));
      std::fflush(stdout);
    }
  }

  // The bytes written, or nothing when no save was attempted (a replica, or an earlier save
  // failed: on a full disk or a read-only folder the next would fail alike).
  std::optional<std::uint64_t> write(wick::Context& c, const std::string& name,
                                     const std::string& reason) {
    if (!c.run().is_main_process()) {
      // Optimizer state sharded over the ranks (ddp's shard_optimizer) is gathered to rank 0
      // inside save_checkpoint, by every rank; without sharding a replica has nothing to do.
      if (c.sharded_state()) c.save_checkpoint((dir_ / name).string(), reason);
      return std::nullopt;
    }
    if (save_failed_) {
      std::fprintf(stderr,
                   "wick: checkpoint (%s) not saved: an earlier save failed; the last checkpoint "
                   "is %s\n",
                   reason.c_str(), last_saved_.empty() ? "(none)" : (dir_ / last_saved_).c_str());
      return std::nullopt;
    }
    try {
      if (supersede_ != Supersede::none) {
        supersede_later(supersede_ == Supersede::all);
        supersede_ = Supersede::none;
      }
      return c.save_checkpoint((dir_ / name).string(), reason).bytes;
    } catch (...) {
      save_failed_ = true;  // no save beside another timeline's checkpoints either
      throw;
    }
  }

  void prune() {
    if (keep_last_ <= 0) return;
    auto all = list_checkpoints();
    std::error_code ec;
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last_) < all.size(); ++i)
      fs::remove_all(all[i], ec);
  }

  std::string dir_param_;
  std::int64_t every_n_steps_, every_n_epochs_, keep_last_, keep_superseded_;
  bool bound_due_ = false;  // a folder was set aside: bound them after the next save
  bool on_cancel_, on_failure_, at_end_;
  std::string monitor_, mode_;

  fs::path dir_;
  bool ready_ = false;          // before_fit finished (a failed restore saves nothing)
  std::shared_ptr<void> lock_;  // the checkpoint folder's, from before_fit to the fit's end
  std::string due_;             // a periodic save waiting for the step or epoch to finish
  bool best_due_ = false;
  bool save_failed_ = false;
  bool has_best_ = false;
  double best_ = 0;
  std::string last_saved_;  // name of the newest checkpoint written or resumed from
  std::string resumed_at_;  // ckpt- name of the position resumed from
  std::string start_;       // ckpt- name of the position the fit started at
  // What of the folder's checkpoints the first save sets aside: every one (a fresh run), those
  // after the one resumed from, or none (done, or another rank's).
  enum class Supersede { none, all, later } supersede_ = Supersede::none;
};

}  // namespace

WICK_PLUGIN(
    Checkpoint,
    wick::PluginDef("checkpoint", "2.0.0",
                    "Atomic checkpoints (periodic, on cancel/failure, at the end, best) "
                    "and exact resume with --resume latest|best|auto|PATH")
        .order(-100)
        .param_string("dir", "checkpoints", "checkpoint folder, relative to trainer.output_dir")
        .param_int("every_n_steps", 0, "save every N optimizer steps (0: never)")
        .param_int("every_n_epochs", 1, "save every N epochs (0: never)")
        .param_int("keep_last", 3, "keep the newest K checkpoints (0: all); best apart")
        .param_int("keep_superseded", 0,
                   "keep the newest K folders of checkpoints a fresh fit or an earlier resume "
                   "point set aside, superseded-... (0: all)")
        .param_bool("on_cancel", true, "save when the fit is cancelled or interrupted")
        .param_bool("on_failure", true, "save when the fit fails between steps (never mid-step)")
        .param_bool("at_end", true, "save when the fit ends")
        .param_string("monitor", "",
                      "epoch metric for checkpoints/best, e.g. \"valid/loss\" (\"\": no best)")
        .param_choice("mode", {"min", "max"}, "min", "which monitor value is best"))
