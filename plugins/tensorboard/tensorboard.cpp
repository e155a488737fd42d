// TensorBoard event files in the run directory, written without TensorFlow or Python: a
// scalar for every value of every metrics record (step records at their optimizer step under
// the value's own name; epoch records under "epoch/" + name, validation values under their
// own "valid/..." names, since only epoch records carry them), the resolved config as text,
// and optionally histograms of the weights and gradients every N optimizer steps. Main
// process only. A resumed run rewrites the file from the records it keeps, as metrics.jsonl
// is cut back, so that no step appears twice (histograms from before the resume are not
// kept).
#include <torch/torch.h>
#include <unistd.h>
#include <wick/context.hpp>
#include <wick/plugin.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "event_writer.hpp"

namespace {

namespace fs = std::filesystem;

// The folders live instances write to: a second instance there would replace the first's
// file as an earlier fit's, and double every curve.
struct Folders {
  std::mutex mu;
  std::map<fs::path, std::pair<const void*, std::string>> writer;  // folder -> instance
};
Folders& folders() {
  static Folders f;
  return f;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class TensorBoard : public wick::Hook {
 public:
  explicit TensorBoard(const wick::Params& p)
      : instance_(p.instance()),
        dir_(p.get_string("dir")),
        every_(p.get_int("histograms_every")),
        bins_(p.get_int("bins")),
        config_(p.get_bool("config")) {
    if (every_ < 0) throw p.error("histograms_every", "must be >= 0 (0: no histograms)");
    if (bins_ < 1 || bins_ > 10000) throw p.error("bins", "must be between 1 and 10000");
  }
  ~TensorBoard() override { release(); }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context& c) {
      const auto run_dir = fs::weakly_canonical(fs::absolute(c.run().output_dir));
      folder_ = fs::weakly_canonical(run_dir / dir_);
      const auto rel = folder_.lexically_relative(run_dir);
      inside_run_ = !rel.empty() && *rel.begin() != "..";
      claim();
      tag_ = run_tag(run_dir.string());
      config_text_ = c.run().config_toml;
      file_.reset();
      // The old files go at the first record (a fresh run) or when a resumed run has its
      // records (on_rewind): a fit that fails before either leaves them as they were.
    });
    r.on(wick::Point::after_fit, [this](wick::Context&) { release(); });
    r.on(wick::Point::after_cancel, [this](wick::Context& c) {
      if (c.cancellation()->ends_fit()) release();
    });
    r.on_rewind([this](const std::vector<wick::Record>& kept) { start(kept); });
    r.on_record([this](const wick::Record& rec) {
      if (folder_.empty()) return;
      if (!file_) start({});
      write(rec);
    });
    if (every_ > 0)
      r.on(wick::Point::after_backward, [this](wick::Context& c) {
        const auto& s = c.state();
        if (!s.training() || !s.is_accum_boundary() || (s.optimizer_step + 1) % every_ != 0) return;
        histograms(c, s.optimizer_step + 1);
      });
  }

 private:
  void claim() {
    auto& f = folders();
    std::lock_guard<std::mutex> lock(f.mu);
    const auto [it, added] = f.writer.emplace(folder_, std::make_pair(this, instance_));
    if (!added && it->second.first != this)
      throw wick::ConfigError("hooks '" + it->second.second + "' and '" + instance_ +
                              "' (plugin 'tensorboard') both write event files to '" +
                              folder_.string() + "'; give one of them another dir");
  }
  void release() {
    auto& f = folders();
    std::lock_guard<std::mutex> lock(f.mu);
    if (auto it = f.writer.find(folder_); it != f.writer.end() && it->second.first == this)
      f.writer.erase(it);
  }

  // 8 hex digits of FNV-1a over the run directory's path: names this run's event files, so
  // that a folder shared by several runs (one logdir) keeps the others'.
  static std::string run_tag(const std::string& run_dir) {
    std::uint32_t h = 2166136261u;
    for (const unsigned char ch : run_dir) h = (h ^ ch) * 16777619u;
    char text[9];
    std::snprintf(text, sizeof text, "%08x", h);
    return text;
  }

  static bool ends_with(const std::string& s, const std::string& end) {
    return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
  }

  // An event file an earlier fit into this run directory wrote: named with its tag, or, in a
  // folder inside the run directory, any of wick's (older versions named no tag). Other runs'
  // and other tools' files stay.
  bool earlier_own(const fs::path& p) const {
    const auto n = p.filename().string();
    if (n.rfind("events.out.tfevents.", 0) != 0 || !ends_with(n, ".wick")) return false;
    return inside_run_ || ends_with(n, "." + tag_ + ".wick");
  }

  // A new event file holding exactly `kept`, in place of this run's earlier ones.
  void start(const std::vector<wick::Record>& kept) {
    file_.reset();
    fs::create_directories(folder_);
    for (const auto& e : fs::directory_iterator(folder_))
      if (e.is_regular_file() && earlier_own(e.path())) fs::remove(e.path());
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    const double now = wall_time();
    const std::string name = "events.out.tfevents." + std::to_string(static_cast<long long>(now)) +
                             "." + host + "." + std::to_string(getpid()) + "." + tag_ + ".wick";
    file_ = std::make_unique<wick_tb::EventFile>((folder_ / name).string());
    file_->write(wick_tb::file_version_event(now));
    if (config_ && !config_text_.empty())
      file_->write(wick_tb::text_event(now, 0, "config", "```toml\n" + config_text_ + "```"));
    for (const auto& rec : kept) write(rec);
  }

  void write(const wick::Record& rec) {
    const double now = wall_time();
    const bool epoch = rec.kind == wick::Record::Kind::epoch;
    for (const auto& [k, v] : rec.values) {
      const std::string tag = epoch && k.rfind("valid/", 0) != 0 ? "epoch/" + k : k;
      file_->write(wick_tb::scalar_event(now, rec.step, tag, static_cast<float>(v)));
    }
  }

  void histograms(wick::Context& c, std::int64_t step) {
    if (!file_) start({});  // before the first record (a resumed run's is open since rewind)
    torch::NoGradGuard g;
    const double now = wall_time();
    for (const auto& p : c.model().named_parameters()) {
      file_->write(wick_tb::histogram_event(now, step, "weights/" + p.key(), histogram(p.value())));
      if (p.value().grad().defined())
        file_->write(
            wick_tb::histogram_event(now, step, "grads/" + p.key(), histogram(p.value().grad())));
    }
  }

  wick_tb::Histogram histogram(const at::Tensor& t) const {
    auto x = t.detach().to(torch::kCPU, torch::kDouble).flatten();
    wick_tb::Histogram h;
    h.num = static_cast<double>(x.numel());
    if (x.numel() == 0) return h;
    h.min = x.min().item<double>();
    h.max = x.max().item<double>();
    h.sum = x.sum().item<double>();
    h.sum_squares = x.square().sum().item<double>();
    if (!(h.max > h.min)) {  // one value (or non-finite ones): one bucket
      h.limits = {h.max};
      h.counts = {h.num};
      return h;
    }
    auto counts = torch::histc(x, bins_, h.min, h.max);
    auto a = counts.accessor<double, 1>();
    for (std::int64_t i = 0; i < bins_; ++i) {
      h.limits.push_back(i + 1 == bins_ ? h.max
                                        : h.min + (h.max - h.min) * static_cast<double>(i + 1) /
                                                      static_cast<double>(bins_));
      h.counts.push_back(a[i]);
    }
    return h;
  }

  std::string instance_, dir_;
  std::int64_t every_, bins_;
  bool config_;
  fs::path folder_;
  bool inside_run_ = true;  // folder_ is the run directory or inside it
  std::string tag_;         // run_tag of the run directory
  std::string config_text_;
  std::unique_ptr<wick_tb::EventFile> file_;
};

}  // namespace

WICK_PLUGIN(TensorBoard,
            wick::PluginDef("tensorboard", "1.0.0",
                            "TensorBoard event files: every record's values as scalars, the "
                            "config as text, weight and gradient histograms")
                .order(90)
                .main_process_only()
                .param_string("dir", "",
                              "folder of the event files, relative to the run directory "
                              "(\"\": the run directory)")
                .param_int("histograms_every", 0,
                           "histograms of the weights and gradients every N optimizer steps "
                           "(0: none)")
                .param_int("bins", 30, "buckets per histogram")
                .param_bool("config", true, "write the resolved config as text"))
