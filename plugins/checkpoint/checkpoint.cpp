// Checkpoints: periodic, on cancel, on failure and at the end; keep_last K; best by a metric;
// exact resume (`wick fit CONFIG --resume latest|PATH`).
//
// A checkpoint is a folder checkpoints/ckpt-eEEEE-bBBBBBB (epoch, batches of it done):
//   model.pt      parameters and buffers by name (torch::pickle_save of a dict, torch.load-able)
//   optimizer.pt  the optimizer's own archive (torch::optim::Optimizer::save)
//   state.pt      step counters, RNG state, the loop's epoch losses, pending gradients and the
//                 state of every stateful hook, keyed by hook instance
//   manifest.json position, run identity (seed, batch size, world size...), sha256 per file
// It is written into a hidden temporary folder beside it, every file fsynced, then renamed
// into place and the parent folder fsynced: a crash or a full disk leaves earlier checkpoints
// untouched, and a half-written one never carries a final name.
//
// Saves are taken between steps, after every hook has finished the step: a save that falls
// due at after_step / after_epoch is written at the next before_step / before_valid /
// before_epoch / after_fit / after_cancel, whichever comes first. The checkpoint hook runs
// first at each point (order -100), so it restores before any other hook's before_fit.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <wick/context.hpp>
#include <wick/outputs.hpp>
#include <wick/plugin.hpp>
#include <wick/sha256.hpp>
#include <wick/state_dict.hpp>
#include <wick/task.hpp>
#include <wick/trainer.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kFormat = 1;
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
const char* const kFiles[] = {"model.pt", "optimizer.pt", "state.pt"};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + p.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

std::vector<char> pickle(const c10::IValue& v) {
  return torch::pickle_save(v);
}
c10::IValue unpickle(const std::string& bytes) {
  return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
}

// str -> any: what pickle_save writes for a dict of mixed values.
using IDict = c10::impl::GenericDict;
IDict new_dict() {
  return IDict(c10::StringType::get(), c10::AnyType::get());
}

IDict to_ivalue(const wick::StateDict& sd) {
  IDict d = new_dict();
  for (const auto& k : sd.keys()) {
    switch (sd.kind(k)) {
      case wick::StateDict::Kind::integer:
        d.insert(k, sd.get_int(k));
        break;
      case wick::StateDict::Kind::floating:
        d.insert(k, sd.get_float(k));
        break;
      case wick::StateDict::Kind::string:
        d.insert(k, sd.get_string(k));
        break;
      case wick::StateDict::Kind::tensor:
        d.insert(k, sd.get_tensor(k));
        break;
    }
  }
  return d;
}

wick::StateDict from_ivalue(const c10::IValue& v, const std::string& what) {
  if (!v.isGenericDict()) throw std::runtime_error(what + " is not a dictionary");
  wick::StateDict sd;
  for (const auto& kv : v.toGenericDict()) {
    const auto key = kv.key().toStringRef();
    const auto x = kv.value();
    if (x.isInt())
      sd.set_int(key, x.toInt());
    else if (x.isDouble())
      sd.set_float(key, x.toDouble());
    else if (x.isString())
      sd.set_string(key, x.toStringRef());
    else if (x.isTensor())
      sd.set_tensor(key, x.toTensor());
    else
      throw std::runtime_error(what + " '" + key + "' has an unsupported type");
  }
  return sd;
}

c10::IValue get(const IDict& d, const std::string& key) {
  auto it = d.find(key);
  if (it == d.end()) throw std::runtime_error("state.pt has no '" + key + "'");
  return it->value();
}

// A checkpoint folder that passed its manifest check.
struct Found {
  fs::path dir;
  json manifest;
};

// Checks a checkpoint folder: manifest readable, every file present with its size and sha256.
// Returns an empty string when valid, else the reason.
std::string verify(const fs::path& dir, json* manifest_out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "not a checkpoint folder";
  const auto mpath = dir / "manifest.json";
  if (!fs::exists(mpath, ec)) return "no manifest.json (an unfinished write?)";
  json m;
  try {
    m = json::parse(read_bytes(mpath));
  } catch (const std::exception& e) {
    return std::string("manifest.json is unreadable: ") + e.what();
  }
  if (!m.is_object() || m.value("format", 0) != kFormat || !m.contains("files") ||
      !m.contains("position") || !m.contains("run"))
    return "manifest.json is not a wick checkpoint manifest (format " + std::to_string(kFormat) +
           ")";
  for (const char* name : kFiles)
    if (!m["files"].contains(name)) return std::string("manifest.json lists no ") + name;
  for (const auto& [name, info] : m["files"].items()) {
    const auto p = dir / name;
    if (!fs::exists(p, ec)) return name + " is missing";
    const auto size = fs::file_size(p, ec);
    if (ec || size != info.value("bytes", std::uint64_t{0}))
      return name + " has " + std::to_string(size) + " bytes, the manifest says " +
             std::to_string(info.value("bytes", std::uint64_t{0})) + " (truncated?)";
    std::string bytes;
    try {
      bytes = read_bytes(p);
    } catch (const std::exception& e) {
      return e.what();
    }
    if (wick::sha256_hex(bytes) != info.value("sha256", std::string()))
      return name + " does not match its sha256 in the manifest (corrupted)";
  }
  if (manifest_out) *manifest_out = std::move(m);
  return {};
}

class Checkpoint : public wick::Hook {
 public:
  explicit Checkpoint(const wick::Params& p)
      : dir_param_(p.get_string("dir")),
        every_n_steps_(p.get_int("every_n_steps")),
        every_n_epochs_(p.get_int("every_n_epochs")),
        keep_last_(p.get_int("keep_last")),
        on_cancel_(p.get_bool("on_cancel")),
        on_failure_(p.get_bool("on_failure")),
        at_end_(p.get_bool("at_end")),
        monitor_(p.get_string("monitor")),
        mode_(p.get_string("mode")) {
    if (every_n_steps_ < 0) throw p.error("every_n_steps", "must be >= 0 (0: never)");
    if (every_n_epochs_ < 0) throw p.error("every_n_epochs", "must be >= 0 (0: never)");
    if (keep_last_ < 0) throw p.error("keep_last", "must be >= 0 (0: keep all)");
    if (mode_ != "min" && mode_ != "max") throw p.error("mode", "must be \"min\" or \"max\"");
  }

  void connect(wick::Registrar& r) override {
    using wick::Point;
    r.on(Point::before_fit, [this](wick::Context& c) { before_fit(c); });
    r.on(Point::before_epoch, [this](wick::Context& c) {
      flush(c);
      pos_ = {c.state().epoch, c.state().batch_idx};
    });
    r.on(Point::before_step, [this](wick::Context& c) {
      if (!c.state().training()) return;
      flush(c);
      pos_ = {c.state().epoch, c.state().batch_idx};
      in_step_ = true;
    });
    r.on(Point::after_step, [this](wick::Context& c) {
      const auto& s = c.state();
      if (!s.training()) return;
      in_step_ = false;
      pos_ = {s.epoch, s.batch_idx + 1};
      if (every_n_steps_ > 0 && s.stepped && s.optimizer_step % every_n_steps_ == 0) due_ = "step";
    });
    r.on(Point::before_valid, [this](wick::Context& c) { flush(c); });
    r.on(Point::after_epoch, [this](wick::Context& c) { after_epoch(c); });
    r.on(Point::after_fit, [this](wick::Context& c) {
      flush(c);
      if (at_end_) save(c, "end");
    });
    r.on(Point::after_cancel, [this](wick::Context& c) { after_cancel(c); });
  }

 private:
  struct Pos {
    std::int64_t epoch = 0, batch = 0;
  };

  static std::string name_of(Pos p) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "ckpt-e%04lld-b%07lld", static_cast<long long>(p.epoch),
                  static_cast<long long>(p.batch));
    return buf;
  }

  // ---- start and resume -------------------------------------------------------------------

  void before_fit(wick::Context& c) {
    ready_ = false;
    save_failed_ = false;
    in_step_ = false;
    due_.clear();
    best_due_ = false;
    has_best_ = false;  // a resume restores these
    best_ = 0;
    last_saved_.clear();
    const auto& run = c.run();
    fs::path d = dir_param_.empty() ? fs::path("checkpoints") : fs::path(dir_param_);
    dir_ = d.is_absolute() ? d : fs::path(run.output_dir) / d;
    if (c.state().is_main_process()) check_writable();
    if (!run.resume.empty()) restore(c, run.resume);
    if (c.state().is_main_process()) supersede_later(run.resume.empty());
    pos_ = {c.state().epoch, c.state().batch_idx};
    ready_ = true;
  }

  // Fails at start, before any training, when checkpoints could not be written.
  void check_writable() {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec)
      throw std::runtime_error("cannot create the checkpoint folder '" + dir_.string() +
                               "': " + ec.message() + "; make it writable or set " +
                               "hooks.checkpoint.dir to a writable folder");
    const auto probe = dir_ / (".probe-" + std::to_string(::getpid()));
    fs::create_directory(probe, ec);
    if (ec)
      throw std::runtime_error("the checkpoint folder '" + dir_.string() + "' is not writable: " +
                               ec.message() + "; make it writable or set hooks.checkpoint.dir");
    fs::remove(probe, ec);
    // Leftovers of a save that was interrupted: never valid checkpoints, safe to remove.
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
      const auto n = e.path().filename().string();
      if (n.rfind(".tmp-", 0) == 0 || n.rfind(".old-", 0) == 0) fs::remove_all(e.path(), ec);
    }
  }

  // Checkpoints of another timeline (an earlier fresh run, or the part of this run after an
  // older checkpoint it was resumed from) would be taken by `--resume latest` and would push
  // this run's own out of keep_last: they are moved aside, never deleted.
  void supersede_later(bool fresh) {
    std::vector<fs::path> later;
    for (const auto& p : list_checkpoints())
      if (fresh || p.filename().string() > last_saved_) later.push_back(p);
    std::error_code ec;
    if (fresh && fs::exists(dir_ / "best", ec)) later.push_back(dir_ / "best");
    if (later.empty()) return;
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
    const auto aside =
        dir_ / ("superseded-" + std::string(stamp) + "-" + std::to_string(::getpid()));
    fs::create_directories(aside, ec);
    for (const auto& p : later) fs::rename(p, aside / p.filename(), ec);
    fsync_dir(dir_);
    std::fprintf(stderr,
                 "wick: note: moved %zu checkpoint(s) of %s aside to '%s'; --resume latest and "
                 "keep_last ignore them\n",
                 later.size(), fresh ? "an earlier run" : "the abandoned later part of this run",
                 aside.c_str());
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

  Found find(const std::string& what) const {
    if (what == "latest") {
      auto all = list_checkpoints();
      std::vector<std::string> skipped;
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        json m;
        auto why = verify(*it, &m);
        if (why.empty()) return {*it, std::move(m)};
        std::fprintf(stderr, "wick: warning: skipping checkpoint '%s': %s\n", it->c_str(),
                     why.c_str());
        skipped.push_back(it->filename().string());
      }
      throw std::runtime_error(
          "--resume latest: no valid checkpoint in '" + dir_.string() + "'" +
          (skipped.empty() ? std::string(" (it has none)")
                           : " (" + std::to_string(skipped.size()) + " skipped as corrupt)") +
          "; run without --resume to start afresh");
    }
    fs::path p(what);
    std::error_code ec;
    if (!fs::exists(p, ec) && fs::exists(dir_ / p, ec)) p = dir_ / p;
    json m;
    auto why = verify(p, &m);
    if (!why.empty())
      throw std::runtime_error("cannot resume from checkpoint '" + p.string() + "': " + why +
                               "; give another checkpoint or use --resume latest");
    return {fs::absolute(p), std::move(m)};
  }

  void restore(wick::Context& c, const std::string& what) {
    const auto t0 = Clock::now();
    auto& tr = c.trainer();
    auto found = find(what);
    const auto& m = found.manifest;
    const auto where = "checkpoint '" + found.dir.string() + "'";

    // The data order is a function of (seed, epoch) and the batch geometry: a resume with
    // another of these would not continue the same run.
    const auto& o = tr.options();
    const json now = {{"seed", o.seed},
                      {"batch_size", o.batch_size},
                      {"world_size", c.state().num_processes},
                      {"shuffle", o.shuffle},
                      {"drop_last", o.drop_last}};
    const json& then = m.at("run");
    std::string diff;
    for (const auto& [k, v] : now.items())
      if (then.value(k, json()) != v)
        diff +=
            "\n  " + k + ": checkpoint " + then.value(k, json()).dump() + ", this run " + v.dump();
    if (!diff.empty())
      throw std::runtime_error(where + " was written by a run with other settings:" + diff +
                               "\na resume must use the checkpoint's seed, batch_size, world "
                               "size, shuffle and drop_last (they fix the data order)");

    load_model(tr, found.dir, where);
    try {
      std::istringstream in(read_bytes(found.dir / "optimizer.pt"));
      torch::serialize::InputArchive a;
      a.load_from(in);
      tr.optimizer().load(a);
    } catch (const c10::Error& e) {
      throw std::runtime_error(where +
                               ": the optimizer state does not load (another optimizer "
                               "in the config?): " +
                               e.what_without_backtrace());
    }
    load_state(c, found.dir, where);

    const Pos p{m.at("position").at("epoch").get<std::int64_t>(),
                m.at("position").at("batch").get<std::int64_t>()};
    tr.set_start(p.epoch, p.batch);
    last_saved_ = found.dir.filename().string();

    // The run continues its own metrics history from the checkpoint: lines a killed run wrote
    // after it are dropped so that no step is logged twice.
    if (m.value("output_dir", std::string()) == c.run().output_dir && m.contains("metrics_bytes")) {
      const auto mf = fs::path(c.run().output_dir) / "metrics.jsonl";
      std::error_code ec;
      const auto keep = m.at("metrics_bytes").get<std::uintmax_t>();
      if (fs::exists(mf, ec) && fs::file_size(mf, ec) > keep) fs::resize_file(mf, keep, ec);
    }
    std::printf("wick: resumed from %s (epoch %lld, batch %lld, optimizer step %lld) in %.1f ms\n",
                found.dir.c_str(), static_cast<long long>(p.epoch), static_cast<long long>(p.batch),
                static_cast<long long>(c.state().optimizer_step), ms_since(t0));
    std::fflush(stdout);
  }

  static void load_model(wick::Trainer& tr, const fs::path& dir, const std::string& where) {
    auto saved = unpickle(read_bytes(dir / "model.pt"));
    if (!saved.isGenericDict()) throw std::runtime_error(where + ": model.pt is not a dict");
    auto dict = saved.toGenericDict();
    std::vector<std::pair<std::string, at::Tensor>> mine;
    for (const auto& kv : tr.model().named_parameters()) mine.emplace_back(kv.key(), kv.value());
    for (const auto& kv : tr.model().named_buffers()) mine.emplace_back(kv.key(), kv.value());
    // Every mismatch at once, so that one look tells what changed.
    std::string bad;
    std::size_t matched = 0;
    for (const auto& [name, t] : mine) {
      auto it = dict.find(name);
      if (it == dict.end()) {
        bad += "\n  " + name + ": expected " + shape_str(t) + ", not in the checkpoint";
        continue;
      }
      const auto found = it->value().toTensor();
      if (found.sizes() != t.sizes() || found.scalar_type() != t.scalar_type())
        bad += "\n  " + name + ": expected " + shape_str(t) + " " +
               std::string(c10::toString(t.scalar_type())) + ", found " + shape_str(found) + " " +
               std::string(c10::toString(found.scalar_type()));
      ++matched;
    }
    for (const auto& kv : dict) {
      const auto name = kv.key().toStringRef();
      if (std::none_of(mine.begin(), mine.end(), [&](const auto& x) { return x.first == name; }))
        bad += "\n  " + name + ": found " + shape_str(kv.value().toTensor()) +
               " in the checkpoint, not in this model";
    }
    if (!bad.empty())
      throw std::runtime_error(where +
                               " does not match the model of this config (tensor: "
                               "expected shape, found shape):" +
                               bad +
                               "\nresume with the model configuration the checkpoint was "
                               "trained with");
    torch::NoGradGuard ng;
    for (auto& [name, t] : mine) t.copy_(dict.at(name).toTensor());
  }

  void load_state(wick::Context& c, const fs::path& dir, const std::string& where) {
    auto& tr = c.trainer();
    auto v = unpickle(read_bytes(dir / "state.pt"));
    if (!v.isGenericDict()) throw std::runtime_error(where + ": state.pt is not a dict");
    auto d = v.toGenericDict();

    auto step = from_ivalue(get(d, "step"), "step");
    auto& s = c.state();
    s.epoch = step.get_int("epoch");
    s.batch_idx = step.get_int("batch");
    s.optimizer_step = step.get_int("optimizer_step");
    s.micro_step = step.get_int("micro_step");
    s.samples_seen = step.get_int("samples_seen");
    s.skipped_steps = step.get_int("skipped_steps");

    auto rng = from_ivalue(get(d, "rng"), "rng");
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng.get_tensor("cpu"));
    }
    for (std::int64_t i = 0; rng.has("cuda" + std::to_string(i)); ++i) {
      if (i >= static_cast<std::int64_t>(torch::cuda::device_count())) break;
      auto gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i));
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng.get_tensor("cuda" + std::to_string(i)));
    }

    tr.load_loop_state(from_ivalue(get(d, "loop"), "loop"));

    // Gradients pending inside an accumulation window (a save between micro-batches).
    auto grads = get(d, "grads").toGenericDict();
    for (auto& kv : tr.model().named_parameters()) {
      auto it = grads.find(kv.key());
      kv.value().mutable_grad() =
          it == grads.end() ? at::Tensor() : it->value().toTensor().to(kv.value().device());
    }

    auto mine = from_ivalue(get(d, "checkpoint"), "checkpoint");
    has_best_ = mine.get_int("has_best") != 0;
    best_ = mine.get_float("best");

    auto hooks = get(d, "hooks").toGenericDict();
    std::vector<std::string> used;
    for (auto& [instance, hook] : tr.stateful_hooks()) {
      auto it = hooks.find(instance);
      if (it == hooks.end()) {
        std::fprintf(stderr, "wick: warning: %s has no state for hook '%s'; it starts afresh\n",
                     where.c_str(), instance.c_str());
        continue;
      }
      try {
        hook->load_state(from_ivalue(it->value(), "hook '" + instance + "' state"));
      } catch (const std::exception& e) {
        throw std::runtime_error(where + ": hook '" + instance +
                                 "' cannot load its state: " + e.what());
      }
      used.push_back(instance);
    }
    for (const auto& kv : hooks)
      if (std::find(used.begin(), used.end(), kv.key().toStringRef()) == used.end())
        std::fprintf(stderr,
                     "wick: warning: %s holds state for hook '%s', which this config does not "
                     "enable; it is ignored\n",
                     where.c_str(), kv.key().toStringRef().c_str());
  }

  // ---- saving -----------------------------------------------------------------------------

  void after_epoch(wick::Context& c) {
    const auto& s = c.state();
    pos_ = {s.epoch + 1, 0};
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
    const auto* ending = c.trainer().ending();
    if (!ending || !ready_) return;  // a CancelStep/CancelEpoch, or the start itself failed
    const bool failed = ending->status == wick::FitResult::Status::failed;
    if (failed ? !on_failure_ : !on_cancel_) {
      flush(c, false);
      return;
    }
    if (in_step_ || c.state().validating()) {
      // Part of the step may have run (gradients, an optimizer update), or validation may have
      // swapped other weights in (EMA): not a point a resume could continue from exactly.
      std::fprintf(stderr,
                   "wick: checkpoint: not saving on %s: it came in the middle of a %s; "
                   "the last checkpoint is %s\n",
                   failed ? "failure" : "cancel", in_step_ ? "step" : "validation",
                   last_saved_.empty() ? "(none)" : (dir_ / last_saved_).c_str());
      return;
    }
    flush(c, false);
    save(c, failed ? "failure" : "cancel");
  }

  void flush(wick::Context& c, bool sync = true) {
    const bool periodic = !due_.empty();  // the same on every rank (step and epoch counts)
    if (!due_.empty()) {
      auto why = std::move(due_);
      due_.clear();
      save(c, why);
    }
    if (best_due_) {
      best_due_ = false;
      save_as(c, "best", "best");
    }
    // Data-parallel: rank 0 writes, every rank waits here until it has (no-op in one process).
    // Not on the way out of a failed fit, where a peer may be gone.
    if (periodic && sync) c.trainer().barrier();
  }

  void save(wick::Context& c, const std::string& reason) {
    const auto name = name_of(pos_);
    if (name == last_saved_) return;  // this very position is saved already
    if (!c.state().is_main_process()) {
      last_saved_ = name;  // rank 0 writes, prunes and reports; the folder is shared
      return;
    }
    const auto t0 = Clock::now();
    const auto bytes = save_as(c, name, reason);
    last_saved_ = name;
    prune();
    if (reason != "step" && reason != "epoch") {
      std::printf("wick: checkpoint (%s) saved: %s (%.2f MB in %.1f ms)\n", reason.c_str(),
                  (dir_ / name).c_str(), static_cast<double>(bytes) / 1e6, ms_since(t0));
      std::fflush(stdout);
    }
  }

  // Returns the bytes written.
  std::uint64_t save_as(wick::Context& c, const std::string& name, const std::string& reason) {
    if (!c.state().is_main_process()) return 0;  // replicas hold the same state
    // After a failed save (a full disk, a read-only folder) the failure save would fail alike.
    if (save_failed_) return 0;
    std::uint64_t total = 0;
    const auto tmp = dir_ / (".tmp-" + name + "-" + std::to_string(::getpid()));
    const auto final_dir = dir_ / name;
    try {
      std::error_code ec;
      fs::remove_all(tmp, ec);
      fs::create_directories(tmp, ec);
      if (ec) throw std::runtime_error("cannot create '" + tmp.string() + "': " + ec.message());
      json files = json::object();
      auto put = [&](const std::string& file, const std::string& bytes) {
        wick::write_file_atomic(tmp / file, bytes);
        files[file] = {{"bytes", bytes.size()}, {"sha256", wick::sha256_hex(bytes)}};
        total += bytes.size();
      };
      auto& tr = c.trainer();
      {
        IDict model = new_dict();
        for (const auto& kv : tr.model().named_parameters())
          model.insert(kv.key(), kv.value().detach().cpu());
        for (const auto& kv : tr.model().named_buffers())
          model.insert(kv.key(), kv.value().detach().cpu());
        auto b = pickle(model);
        put("model.pt", std::string(b.begin(), b.end()));
      }
      {
        torch::serialize::OutputArchive a;
        tr.optimizer().save(a);
        std::ostringstream out;
        a.save_to(out);
        put("optimizer.pt", out.str());
      }
      {
        auto b = pickle(state_dict(c));
        put("state.pt", std::string(b.begin(), b.end()));
      }
      const auto& o = tr.options();
      json m = {{"format", kFormat},
                {"reason", reason},
                {"position", {{"epoch", pos_.epoch}, {"batch", pos_.batch}}},
                {"optimizer_step", c.state().optimizer_step},
                {"micro_step", c.state().micro_step},
                {"samples_seen", c.state().samples_seen},
                {"run",
                 {{"seed", o.seed},
                  {"batch_size", o.batch_size},
                  {"world_size", c.state().num_processes},
                  {"shuffle", o.shuffle},
                  {"drop_last", o.drop_last}}},
                {"output_dir", c.run().output_dir},
                {"files", files}};
      const auto mf = fs::path(c.run().output_dir) / "metrics.jsonl";
      if (fs::exists(mf, ec)) m["metrics_bytes"] = fs::file_size(mf, ec);
      if (has_best_) m["best"] = {{"monitor", monitor_}, {"mode", mode_}, {"value", best_}};
      // The manifest last: a folder without one is an unfinished write.
      wick::write_file_atomic(tmp / "manifest.json", m.dump(2) + "\n");
      fsync_dir(tmp);
      if (fs::exists(final_dir, ec)) {
        // Replacing (best, or a position an earlier run also saved): move the old one aside,
        // put the new one in place, then drop the old one.
        const auto old = dir_ / (".old-" + name + "-" + std::to_string(::getpid()));
        fs::remove_all(old, ec);
        fs::rename(final_dir, old);
        fs::rename(tmp, final_dir);
        fs::remove_all(old, ec);
      } else {
        fs::rename(tmp, final_dir);
      }
      fsync_dir(dir_);
      return total;
    } catch (const std::exception& e) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
      save_failed_ = true;
      throw std::runtime_error("cannot save checkpoint '" + final_dir.string() + "': " + e.what() +
                               "; the earlier checkpoints in '" + dir_.string() +
                               "' are untouched (free space or fix permissions, then resume)");
    }
  }

  IDict state_dict(wick::Context& c) const {
    auto& tr = c.trainer();
    const auto& s = c.state();
    IDict d = new_dict();
    wick::StateDict step;
    step.set_int("epoch", pos_.epoch);
    step.set_int("batch", pos_.batch);
    step.set_int("optimizer_step", s.optimizer_step);
    step.set_int("micro_step", s.micro_step);
    step.set_int("samples_seen", s.samples_seen);
    step.set_int("skipped_steps", s.skipped_steps);
    d.insert("step", to_ivalue(step));

    wick::StateDict rng;
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng.set_tensor("cpu", gen.get_state());
    }
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(torch::cuda::device_count()); ++i) {
      auto gen = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i));
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng.set_tensor("cuda" + std::to_string(i), gen.get_state());
    }
    d.insert("rng", to_ivalue(rng));

    wick::StateDict loop;
    tr.save_loop_state(loop);
    d.insert("loop", to_ivalue(loop));

    IDict grads = new_dict();
    for (const auto& kv : tr.model().named_parameters())
      if (kv.value().grad().defined()) grads.insert(kv.key(), kv.value().grad().detach().cpu());
    d.insert("grads", grads);

    wick::StateDict mine;
    mine.set_int("has_best", has_best_ ? 1 : 0);
    mine.set_float("best", best_);
    d.insert("checkpoint", to_ivalue(mine));

    IDict hooks = new_dict();
    for (auto& [instance, hook] : tr.stateful_hooks()) {
      wick::StateDict sd;
      hook->save_state(sd);
      hooks.insert(instance, to_ivalue(sd));
    }
    d.insert("hooks", hooks);
    return d;
  }

  void prune() {
    if (keep_last_ <= 0) return;
    auto all = list_checkpoints();
    std::error_code ec;
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last_) < all.size(); ++i)
      fs::remove_all(all[i], ec);
  }

  std::string dir_param_;
  std::int64_t every_n_steps_, every_n_epochs_, keep_last_;
  bool on_cancel_, on_failure_, at_end_;
  std::string monitor_, mode_;

  fs::path dir_;
  Pos pos_;               // the position the model is at: batches of pos_.epoch done
  bool ready_ = false;    // before_fit finished (a failed restore saves nothing)
  bool in_step_ = false;  // between before_step and after_step of a training batch
  std::string due_;       // a periodic save waiting for the step or epoch to finish
  bool best_due_ = false;
  bool save_failed_ = false;
  bool has_best_ = false;
  double best_ = 0;
  std::string last_saved_;  // name of the newest checkpoint written or resumed from
};

}  // namespace

WICK_PLUGIN(
    Checkpoint,
    wick::PluginDef("checkpoint", "1.0.0",
                    "Atomic checkpoints (periodic, on cancel/failure, at the end, best) "
                    "and exact resume with --resume latest|PATH")
        .order(-100)
        .param_string("dir", "checkpoints", "checkpoint folder, relative to trainer.output_dir")
        .param_int("every_n_steps", 0, "save every N optimizer steps (0: never)")
        .param_int("every_n_epochs", 1, "save every N epochs (0: never)")
        .param_int("keep_last", 3, "keep the newest K checkpoints (0: all); best apart")
        .param_bool("on_cancel", true, "save when the fit is cancelled or interrupted")
        .param_bool("on_failure", true, "save when the fit fails between steps (never mid-step)")
        .param_bool("at_end", true, "save when the fit ends")
        .param_string("monitor", "",
                      "epoch metric for checkpoints/best, e.g. \"valid/loss\" (\"\": no best)")
        .param_string("mode", "min", "\"min\" or \"max\": which monitor value is best"))
