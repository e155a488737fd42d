// `wick sweep CONFIG --param PATH=SPEC ...`: a hyperparameter search. Each trial is a `wick fit`
// process with its own output folder under the sweep folder; the sweep reads the trials'
// metrics.jsonl as they grow, stops weak trials early (--halving), keeps its state in
// sweep.json (a killed sweep resumes: finished trials kept, unfinished ones resumed from their
// checkpoints) and writes results.csv, results.md and best.toml. About 600 lines: the search
// space is tune/sweep.cpp's; what stays here is the one loop that starts, watches, stops and
// resumes trial processes, whose state (sweep.json) every part of it reads and writes.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "commands.hpp"
#include "wick/config.hpp"
#include "wick/files.hpp"
#include "wick/launch.hpp"
#include "wick/loader.hpp"
#include "wick/sha256.hpp"
#include "wick/sweep.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace wick::cli {

namespace {

struct SweepArgs {
  ConfigArgs config;
  std::vector<std::string> params;
  std::int64_t trials = 8;
  bool grid = false;
  int jobs = 1;
  std::string metric = "valid/loss";
  std::string mode = "min";
  bool halving = false;
  std::int64_t eta = 3, min_epochs = 1;
  std::string out;
  std::uint64_t seed = 0;
};

// Where a trial is; written to sweep.json, results.csv and results.md by name.
enum class TrialStatus {
  pending,    // not started, or to be resumed
  running,    // a fit process runs it
  completed,  // its fit ended with exit 0
  stopped,    // the halving rule stopped it
  failed,     // its fit failed (note says why)
};
constexpr TrialStatus kTrialStatuses[] = {TrialStatus::pending, TrialStatus::running,
                                          TrialStatus::completed, TrialStatus::stopped,
                                          TrialStatus::failed};
const char* to_string(TrialStatus s) {
  switch (s) {
    case TrialStatus::pending:
      return "pending";
    case TrialStatus::running:
      return "running";
    case TrialStatus::completed:
      return "completed";
    case TrialStatus::stopped:
      return "stopped";
    case TrialStatus::failed:
      return "failed";
  }
  return "?";
}

struct Trial {
  int id = 0;
  std::string dir;  // relative to the sweep folder: trial-001
  std::vector<std::string> values;
  TrialStatus status = TrialStatus::pending;
  bool started = false;         // ran before (a resumed sweep continues it with --resume auto)
  bool halted = false;          // the halving rule stopped it (SIGTERM sent)
  std::string note;             // why it stopped or failed
  std::int64_t epochs = 0;      // epochs completed
  std::optional<double> value;  // the metric at its last epoch record
  std::map<std::int64_t, double> rungs;  // epoch -> metric, where the halving rule judged it
  double wall_s = 0;
  // While running (not kept):
  pid_t pid = -1;
  bool exited_ok = false;     // its fit ended with exit 0 (set before the last records are read)
  std::uintmax_t offset = 0;  // bytes of metrics.jsonl read
  std::int64_t printed_epochs = 0;
};

std::atomic<int> g_signal{0};
void on_signal(int sig) {
  if (g_signal == 0) g_signal = sig;
}

std::string num6g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A CSV cell: quoted (its quotes doubled) when it holds a comma or a quote, e.g. a TOML list or
// string.
std::string csv_cell(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

class Sweep {
 public:
  explicit Sweep(SweepArgs a) : a_(std::move(a)) {}
  int run();

 private:
  json plan_json() const;
  void plan();  // params_, trials_ and the checks that need no trial
  void load_or_start();
  void save() const;
  std::vector<std::string> trial_sets(const Trial& t) const;
  void start(Trial& t);
  void poll(Trial& t);
  void finish(Trial& t, int status);
  void judge(Trial& t, std::int64_t epoch, double value);
  void stop_all(int sig);
  void write_results() const;
  std::string values_text(const Trial& t) const;
  const Trial* best() const;
  bool maximize() const { return a_.mode == "max"; }

  SweepArgs a_;
  fs::path dir_;
  std::vector<SweepParam> params_;
  std::vector<Trial> trials_;
  std::int64_t max_epochs_ = 1;
  int threads_ = 0;            // per trial, for trainer.threads = "auto" (0: the config's own)
  std::string config_sha256_;  // of the config as read: another value is another sweep
  std::string metric_error_;
};

json Sweep::plan_json() const {
  json j;
  j["config"] = fs::absolute(a_.config.config).lexically_normal().string();
  j["sets"] = a_.config.sets;
  j["params"] = a_.params;
  j["grid"] = a_.grid;
  j["trials"] = a_.grid ? 0 : a_.trials;
  j["seed"] = a_.seed;
  j["metric"] = a_.metric;
  j["mode"] = a_.mode;
  j["halving"] = a_.halving;
  j["eta"] = a_.eta;
  j["min_epochs"] = a_.min_epochs;
  j["config_sha256"] = config_sha256_;
  return j;
}

void Sweep::plan() {
  if (a_.params.empty())
    throw ConfigError(
        "wick sweep needs at least one --param PATH=SPEC, e.g. --param "
        "optimizer.lr=log:1e-4:1e-2");
  if (a_.mode != "min" && a_.mode != "max")
    throw ConfigError("--mode must be min or max, not '" + a_.mode + "'");
  if (a_.jobs < 1) throw ConfigError("--jobs must be at least 1");
  if (!a_.grid && a_.trials < 1) throw ConfigError("--trials must be at least 1");
  if (a_.eta < 2) throw ConfigError("--eta must be at least 2 (the halving keeps 1/eta)");
  if (a_.min_epochs < 1) throw ConfigError("--min-epochs must be at least 1");
  for (const auto& p : a_.params) {
    params_.push_back(parse_sweep_param(p));
    if (params_.back().path == "trainer.output_dir")
      throw ConfigError("--param " + p +
                        ": the sweep sets each trial's folder (OUT/trial-NNN); sweep other keys, "
                        "and choose the sweep's folder with --out");
    for (std::size_t i = 0; i + 1 < params_.size(); ++i)
      if (params_[i].path == params_.back().path)
        throw ConfigError("--param " + p + ": " + params_.back().path + " is swept twice");
  }
  const auto values = plan_trials(params_, a_.grid, a_.trials, a_.seed);
  // Every trial's config is loaded now: a path not in the schema, or a value its key refuses,
  // stops the sweep before anything runs.
  const auto base = Config::load(a_.config.config, a_.config.sets);
  config_sha256_ = sha256_hex(base.toml());  // what it sets: a comment's edit is no other sweep
  PluginFinder finder(base.search_path(absolute_all(a_.config.plugin_paths)));
  max_epochs_ = 0;
  for (std::size_t t = 0; t < values.size(); ++t) {
    Trial trial;
    trial.id = static_cast<int>(t + 1);
    char name[32];
    std::snprintf(name, sizeof name, "trial-%03d", trial.id);
    trial.dir = name;
    trial.values = values[t];
    try {
      const auto cfg = Config::load(a_.config.config, trial_sets(trial));
      // Plugin tables are checked against their plugins' parameters (as `wick check` does).
      (void)cfg.make_hooks(finder);
      (void)cfg.make_metrics(finder);
      if (cfg.has_task()) cfg.check_task(finder);
      max_epochs_ = std::max(max_epochs_, cfg.trainer().epochs);
    } catch (const ConfigError& e) {
      // Named by the --param whose value it is about, when one is.
      std::string msg = e.what();
      for (std::size_t k = 0; k < params_.size(); ++k) {
        const std::string set = "--set " + params_[k].path + "=" + trial.values[k] + ": ";
        if (msg.rfind(set, 0) != 0) continue;
        // log: and uniform: draw floats; an integer key takes int:LO:HI or a list.
        const bool float_range =
            params_[k].spec.rfind("log:", 0) == 0 || params_[k].spec.rfind("uniform:", 0) == 0;
        const bool wants_integer = msg.find("must be an integer, not a float") != std::string::npos;
        throw ConfigError("--param " + params_[k].path + "=" + params_[k].spec + ": " +
                          msg.substr(set.size()) +
                          (float_range && wants_integer
                               ? "; log: and uniform: draw floats: for an integer key use "
                                 "int:LO:HI or a list of integers"
                               : ""));
      }
      throw;
    }
    trials_.push_back(std::move(trial));
  }
  if (a_.out.empty()) a_.out = base.trainer().output_dir + "-sweep";
  dir_ = a_.out;
  const bool sets_threads = std::any_of(params_.begin(), params_.end(), [](const SweepParam& p) {
    return p.path == "trainer.threads";
  });
  // "auto" (the default) shares the cores among the trials; a count the config (or --set)
  // gives is the user's, and best.toml records it as the trials ran.
  if (!sets_threads && base.trainer().auto_threads) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads_ = std::max(1, cores / a_.jobs);
  }
}

// A trial's status as sweep.json names it; any other word is a damaged or hand-edited file.
TrialStatus read_status(const fs::path& file, int id, const std::string& word) {
  std::vector<std::string> names;
  std::string list;
  for (const auto s : kTrialStatuses) {
    if (word == to_string(s)) return s;
    names.emplace_back(to_string(s));
    list += (list.empty() ? "" : ", ") + names.back();
  }
  const auto near = did_you_mean(word, names);
  throw ConfigError(file.string() + ": trial " + std::to_string(id) + " has status '" + word +
                    "', not one of " + list +
                    (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                    "; fix it, or remove the file to start the sweep anew");
}

void Sweep::load_or_start() {
  const fs::path file = dir_ / "sweep.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) return;
  std::ifstream in(file);
  const auto j = json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.contains("plan") || !j.contains("trials"))
    throw ConfigError(file.string() + " is not a sweep's state; remove it or choose another --out");
  const auto mine = plan_json();
  for (const auto& [k, v] : mine.items())
    if (k == "config_sha256" && !j["plan"].contains(k))
      continue;  // a sweep of an older wick, which kept no hash
    else if (k == "config_sha256" && j["plan"][k] != v)
      throw ConfigError(dir_.string() + " holds a sweep of " + a_.config.config +
                        " as it was before an edit (its sha256 was " +
                        j["plan"][k].get<std::string>().substr(0, 12) + "..., now " +
                        v.get<std::string>().substr(0, 12) +
                        "...): its results are not this config's; choose another --out or "
                        "remove the folder");
    else if (!j["plan"].contains(k) || j["plan"][k] != v)
      throw ConfigError(dir_.string() + " holds another sweep (its '" + k + "' was " +
                        (j["plan"].contains(k) ? j["plan"][k].dump() : "unset") + ", now " +
                        v.dump() + "); choose another --out or remove the folder");
  std::size_t kept = 0, resumed = 0;
  for (const auto& s : j["trials"]) {
    const auto id = s.value("id", 0);
    if (id < 1 || id > static_cast<int>(trials_.size())) continue;
    auto& t = trials_[static_cast<std::size_t>(id - 1)];
    t.status = read_status(file, id, s.value("status", "pending"));
    t.started = s.value("started", false);
    t.halted = s.value("halted", false);
    t.note = s.value("note", "");
    t.epochs = s.value("epochs", std::int64_t{0});
    if (s.contains("value"))  // null: a NaN, as the trial's records wrote it
      t.value = s["value"].is_number() ? s["value"].get<double>()
                                       : std::numeric_limits<double>::quiet_NaN();
    t.wall_s = s.value("wall_s", 0.0);
    if (s.contains("rungs"))
      for (const auto& [e, v] : s["rungs"].items())  // null: a NaN
        t.rungs[std::stoll(e)] =
            v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
    if (t.status == TrialStatus::running) {
      // Killed with the sweep: a halted one is done; the others continue from a checkpoint.
      t.status = t.halted ? TrialStatus::stopped : TrialStatus::pending;
      if (!t.halted) ++resumed;
    }
    if (t.status != TrialStatus::pending) ++kept;
  }
  std::fprintf(stderr, "wick sweep: resuming %s: %zu trial(s) kept, %zu resumed from checkpoints\n",
               dir_.c_str(), kept, resumed);
}

void Sweep::save() const {
  json j;
  j["plan"] = plan_json();
  auto& list = j["trials"] = json::array();
  for (const auto& t : trials_) {
    json s;
    s["id"] = t.id;
    s["dir"] = t.dir;
    json values;
    for (std::size_t k = 0; k < params_.size(); ++k) values[params_[k].path] = t.values[k];
    s["values"] = values;
    s["status"] = to_string(t.status);
    s["started"] = t.started;
    s["halted"] = t.halted;
    if (!t.note.empty()) s["note"] = t.note;
    s["epochs"] = t.epochs;
    if (t.value) s["value"] = *t.value;
    s["wall_s"] = t.wall_s;
    json rungs = json::object();
    for (const auto& [e, v] : t.rungs) rungs[std::to_string(e)] = v;
    s["rungs"] = rungs;
    list.push_back(s);
  }
  write_file_atomic(dir_ / "sweep.json", j.dump(2) + "\n");
}

std::string Sweep::values_text(const Trial& t) const {
  std::string s;
  for (std::size_t k = 0; k < params_.size(); ++k)
    s += (k ? " " : "") + params_[k].path + "=" + t.values[k];
  return s;
}

std::vector<std::string> Sweep::trial_sets(const Trial& t) const {
  auto sets = a_.config.sets;
  for (std::size_t k = 0; k < params_.size(); ++k)
    sets.push_back(params_[k].path + "=" + t.values[k]);
  return sets;
}

// The trial's folder is free once a wick fit of a killed sweep has ended (its lock goes with
// it): waited for, so that the resumed fit does not find it in use.
void wait_for_folder(const fs::path& dir) {
  const int fd = ::open((dir / "wick.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  for (int i = 0; i < 600 && ::flock(fd, LOCK_EX | LOCK_NB) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::close(fd);
}

void Sweep::start(Trial& t) {
  const fs::path tdir = dir_ / t.dir;
  fs::create_directories(tdir);
  std::vector<std::string> args = {fs::read_symlink("/proc/self/exe").string(), "fit",
                                   a_.config.config};
  for (const auto& s : trial_sets(t)) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--set", "trainer.output_dir=" + tdir.string()});
  if (threads_ > 0)
    args.insert(args.end(), {"--set", "trainer.threads=" + std::to_string(threads_)});
  for (const auto& p : a_.config.plugin_paths) args.insert(args.end(), {"--plugin-path", p});
  const bool resume = t.started;
  if (resume) {
    args.insert(args.end(), {"--resume", "auto"});
    wait_for_folder(tdir);
  }
  const int log =
      ::open((tdir / "fit.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0)
    throw std::runtime_error("cannot write " + (tdir / "fit.log").string() + ": " +
                             std::strerror(errno));
  std::vector<ChildEnv> env;
  if (threads_ > 0) env.push_back({"OMP_NUM_THREADS", std::to_string(threads_)});
  // Its own process group, as launch's ranks: a Ctrl-C at the terminal reaches the sweep,
  // which stops each trial once; a sweep killed outright takes its trials along (SIGTERM:
  // they save a checkpoint).
  const pid_t pid = start_child(args, log, log, env);
  ::close(log);
  t.pid = pid;
  t.status = TrialStatus::running;
  t.started = true;
  t.offset = 0;
  t.printed_epochs = t.epochs;
  save();
  std::printf("[trial %d/%zu] %s: %s (%s)\n", t.id, trials_.size(), resume ? "resumed" : "started",
              values_text(t).c_str(), (tdir / "fit.log").c_str());
  std::fflush(stdout);
}

void Sweep::judge(Trial& t, std::int64_t epoch, double value) {
  if (!a_.halving || t.rungs.count(epoch)) return;
  const auto rungs = halving_rungs(a_.min_epochs, a_.eta, max_epochs_);
  if (std::find(rungs.begin(), rungs.end(), epoch) == rungs.end()) return;
  t.rungs[epoch] = value;
  std::vector<double> at_rung;
  for (const auto& o : trials_)
    if (auto it = o.rungs.find(epoch); it != o.rungs.end()) at_rung.push_back(it->second);
  // A trial that completed before its rung was read (epochs shorter than the polling gap)
  // trained to its end: its result stands, not a verdict that came too late to act on. One
  // stopped with the sweep is judged: it is resumed only if kept.
  if (halving_keeps(value, at_rung, a_.eta, maximize()) || t.exited_ok) {
    save();
    return;
  }
  t.halted = true;
  t.note = "halving: " + num6g(value) + " after epoch " + std::to_string(epoch) +
           " is not in the best 1/" + std::to_string(a_.eta) + " of the " +
           std::to_string(at_rung.size()) + " trials there";
  save();  // before the signal: a sweep killed now still knows the trial was stopped
  if (t.pid > 0) ::kill(t.pid, SIGTERM);
}

void Sweep::poll(Trial& t) {
  const fs::path file = dir_ / t.dir / "metrics.jsonl";
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) return;
  if (size < t.offset) t.offset = 0;  // a resumed fit cut its records back to its checkpoint
  if (size == t.offset) return;
  std::ifstream in(file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(t.offset));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: a line still being written
    t.offset += line.size() + 1;
    const auto r = json::parse(line, nullptr, false);
    if (!r.is_object() || r.value("kind", "") != "epoch") continue;
    const std::int64_t epoch = r.value("epoch", std::int64_t{0}) + 1;
    t.epochs = epoch;
    // null is how metrics.jsonl writes a NaN or an infinity: a value, and no best one.
    if (!r.contains(a_.metric) || !(r[a_.metric].is_number() || r[a_.metric].is_null())) {
      std::vector<std::string> keys;
      std::string listed;
      for (const auto& [k, v] : r.items())
        if (v.is_number() && k != "epoch" && k != "step") {
          keys.push_back(k);
          listed += (listed.empty() ? "" : ", ") + k;
        }
      metric_error_ = "--metric " + a_.metric + ": trial " + std::to_string(t.id) +
                      "'s epoch records have no such value (they log " + listed + ")";
      if (auto s = did_you_mean(a_.metric, keys); !s.empty())
        metric_error_ += "; did you mean '" + s + "'?";
      return;
    }
    const double v = r[a_.metric].is_null() ? std::numeric_limits<double>::quiet_NaN()
                                            : r[a_.metric].get<double>();
    t.value = v;
    if (epoch > t.printed_epochs) {
      t.printed_epochs = epoch;
      std::printf("[trial %d/%zu] epoch %lld/%lld %s %s\n", t.id, trials_.size(),
                  static_cast<long long>(epoch), static_cast<long long>(max_epochs_),
                  a_.metric.c_str(), num6g(v).c_str());
      std::fflush(stdout);
    }
    judge(t, epoch, v);
  }
}

void Sweep::finish(Trial& t, int status) {
  t.pid = -1;
  t.exited_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  poll(t);
  std::ifstream in(dir_ / t.dir / "summary.json");
  const auto s = json::parse(in, nullptr, false);
  if (s.is_object()) t.wall_s += s.value("wall_s", 0.0);
  const bool ok = t.exited_ok;
  const bool terminated = WIFEXITED(status) && WEXITSTATUS(status) == 143;
  if (ok) {
    t.status = TrialStatus::completed;
  } else if (t.halted && terminated) {
    t.status = TrialStatus::stopped;
  } else if (terminated && g_signal != 0) {
    t.status = TrialStatus::running;  // stopped with the sweep: resumed by the next run of it
  } else {
    t.status = TrialStatus::failed;
    // The fit's last line says why.
    std::ifstream log(dir_ / t.dir / "fit.log");
    std::string line, last;
    while (std::getline(log, line))
      if (!line.empty()) last = line;
    t.note = describe_wait_status(status) + (last.empty() ? "" : ": " + last);
  }
  save();
  if (t.status == TrialStatus::running) return;
  std::printf("[trial %d/%zu] %s after %lld epoch(s)%s%s%s\n", t.id, trials_.size(),
              to_string(t.status), static_cast<long long>(t.epochs),
              t.value ? (": " + a_.metric + " " + num6g(*t.value)).c_str() : "",
              t.note.empty() ? "" : "; ", t.note.c_str());
  std::fflush(stdout);
}

void Sweep::stop_all(int sig) {
  for (auto& t : trials_)
    if (t.pid > 0) ::kill(t.pid, sig);
}

const Trial* Sweep::best() const {
  // Completed trials first: a trial stopped early has trained less, not worse.
  const Trial* b = nullptr;
  for (const TrialStatus status : {TrialStatus::completed, TrialStatus::stopped}) {
    for (const auto& t : trials_) {
      if (t.status != status || !t.value || !std::isfinite(*t.value)) continue;
      if (!b || (maximize() ? *t.value > *b->value : *t.value < *b->value)) b = &t;
    }
    if (b) return b;
  }
  return nullptr;
}

void Sweep::write_results() const {
  std::string csv = "trial,status,epochs," + a_.metric;
  for (const auto& p : params_) csv += "," + p.path;
  csv += ",wall_s,dir\n";
  for (const auto& t : trials_) {
    csv += std::to_string(t.id) + "," + to_string(t.status) + "," + std::to_string(t.epochs) + "," +
           (t.value ? num6g(*t.value) : "");
    for (const auto& v : t.values) csv += "," + csv_cell(v);
    csv += "," + num6g(t.wall_s) + "," + t.dir + "\n";
  }
  write_file_atomic(dir_ / "results.csv", csv);

  // Markdown, best first.
  std::vector<const Trial*> order;
  for (const auto& t : trials_) order.push_back(&t);
  const Trial* b = best();
  // Finite values by the metric, then a NaN or infinity (no best one), then none.
  auto rank = [](const Trial* t) { return !t->value ? 2 : std::isfinite(*t->value) ? 0 : 1; };
  std::stable_sort(order.begin(), order.end(), [&](const Trial* x, const Trial* y) {
    if (rank(x) != rank(y)) return rank(x) < rank(y);
    if (rank(x) != 0) return false;
    return maximize() ? *x->value > *y->value : *x->value < *y->value;
  });
  std::string md = "| trial | status | epochs | " + a_.metric;
  for (const auto& p : params_) md += " | " + p.path;
  md += " | wall s |\n|---|---|---|---";
  for (std::size_t k = 0; k < params_.size(); ++k) md += "|---";
  md += "|---|\n";
  for (const auto* t : order) {
    md += "| " + std::to_string(t->id) + (t == b ? " (best)" : "") + " | " + to_string(t->status) +
          " | " + std::to_string(t->epochs) + " | " + (t->value ? num6g(*t->value) : "-");
    for (const auto& v : t->values) md += " | " + v;
    md += " | " + num6g(t->wall_s) + " |\n";
  }
  write_file_atomic(dir_ / "results.md", md);
  std::fputs(("\n" + md).c_str(), stdout);

  if (!b) return;
  const auto cfg = Config::load(a_.config.config, trial_sets(*b));
  write_file_atomic(dir_ / "best.toml",
                    "# The best trial of `wick sweep` in " + dir_.string() + ": trial " +
                        std::to_string(b->id) + ", " + a_.metric + " " + num6g(*b->value) + "\n# " +
                        values_text(*b) + "\n# " + a_.config.config +
                        " with these values; relative paths in it resolve as they did there.\n" +
                        cfg.toml());
  std::printf("\nwick sweep: best trial %d (%s %s): %s\nwick sweep: wrote %s, %s and %s\n", b->id,
              a_.metric.c_str(), num6g(*b->value).c_str(), values_text(*b).c_str(),
              (dir_ / "results.csv").c_str(), (dir_ / "results.md").c_str(),
              (dir_ / "best.toml").c_str());
}

// Holds the sweep folder for the sweep's life (flock: it goes with the process).
struct FolderLock {
  int fd = -1;
  explicit FolderLock(const fs::path& dir) {
    fd = ::open((dir / "sweep.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0)
      throw ConfigError("sweep folder " + dir.string() +
                        " is in use by another wick sweep; wait for it, or choose another --out");
  }
  ~FolderLock() {
    if (fd >= 0) ::close(fd);
  }
};

int Sweep::run() {
  plan();
  fs::create_directories(dir_);
  FolderLock lock(dir_);
  load_or_start();
  save();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(s, &sa, nullptr);
  const auto running = [&] {
    return std::count_if(trials_.begin(), trials_.end(), [](const Trial& t) { return t.pid > 0; });
  };
  bool signalled = false;
  for (;;) {
    if (g_signal != 0 && !signalled) {
      signalled = true;
      std::fprintf(stderr, "wick sweep: stopping the running trials (they save a checkpoint)\n");
      stop_all(SIGTERM);
    }
    if (!metric_error_.empty() && !signalled) {
      signalled = true;
      stop_all(SIGTERM);
    }
    if (!signalled)
      for (auto& t : trials_)
        if (t.status == TrialStatus::pending && running() < a_.jobs) start(t);
    for (auto& t : trials_) {
      if (t.pid <= 0) continue;
      poll(t);
      int status = 0;
      if (::waitpid(t.pid, &status, WNOHANG) == t.pid) finish(t, status);
    }
    if (running() == 0 &&
        (signalled || std::none_of(trials_.begin(), trials_.end(), [](const Trial& t) {
           return t.status == TrialStatus::pending;
         })))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!metric_error_.empty()) {
    // The trials stopped for it are not failures of theirs: run again with a metric they log.
    for (auto& t : trials_)
      if (t.status == TrialStatus::failed || t.status == TrialStatus::running)
        t.status = TrialStatus::pending;
    save();
    throw ConfigError(metric_error_);
  }
  if (g_signal != 0) {
    std::fprintf(stderr, "wick sweep: stopped; run the same command again to resume\n");
    return 128 + g_signal;
  }
  write_results();
  const bool any = std::any_of(trials_.begin(), trials_.end(), [](const Trial& t) {
    return t.status == TrialStatus::completed || t.status == TrialStatus::stopped;
  });
  return any ? kOk : kFailed;
}

}  // namespace

void add_sweep_command(CLI::App& app, Registry& r) {
  static SweepArgs a;
  auto* cmd = app.add_subcommand(
      "sweep",
      "hyperparameter search: each trial is a `wick fit` of CONFIG with the --param values, in "
      "its own folder under the sweep folder; --halving stops weak trials early; writes "
      "results.csv, results.md and best.toml; run the same command again to resume a stopped "
      "sweep (finished trials kept, unfinished ones resumed from their checkpoints)");
  add_config_args(cmd, a.config);
  cmd->add_option("--param", a.params,
                  "PATH=SPEC, a config key to sweep: [v1, v2, ...], log:LO:HI[:N], "
                  "uniform:LO:HI[:N] or int:LO:HI (N: points on a --grid)")
      ->type_name("PATH=SPEC");
  auto* trials =
      cmd->add_option("--trials", a.trials, "random trials to draw")->capture_default_str();
  cmd->add_flag("--grid", a.grid, "every combination of the values instead")->excludes(trials);
  cmd->add_option("--jobs", a.jobs,
                  "trials at a time; the cores are divided between them (trainer.threads)")
      ->capture_default_str();
  cmd->add_option("--metric", a.metric, "epoch record value to compare trials by")
      ->capture_default_str();
  cmd->add_option("--mode", a.mode, "min or max: which values of the metric are better")
      ->capture_default_str();
  cmd->add_flag("--halving", a.halving,
                "successive halving: at epochs min-epochs * eta^k a trial goes on only if in "
                "the best 1/eta of the trials that got there");
  cmd->add_option("--eta", a.eta, "halving: keep 1/eta at each rung")->capture_default_str();
  cmd->add_option("--min-epochs", a.min_epochs, "halving: the first rung's epoch")
      ->capture_default_str();
  cmd->add_option("--out", a.out, "sweep folder (default: trainer.output_dir + \"-sweep\")")
      ->type_name("DIR");
  cmd->add_option("--seed", a.seed, "seed of the random draws")->capture_default_str();
  r.push_back({cmd, [] { return guarded([] { return Sweep(a).run(); }); }});
}

}  // namespace wick::cli
