// A progress display. On a terminal: one line redrawn in place (epoch, step/total, mean loss
// since the last redraw, samples/s, time left in the epoch), at most every redraw_s seconds.
// Elsewhere (a pipe, a CI log): a plain line every `every` training steps. Each epoch ends
// with a line of its record (train and valid metrics). Reading the loss costs one device
// sync per line drawn, never one per step, and a step costs no device work: the step losses
// are kept (a reference each, as the trainer keeps them) and summed on the device when a line
// is drawn, or every kFold steps.
#include <wick/plugin.hpp>
#include <wick/task.hpp>
#include <wick/wick.hpp>

#include <sys/ioctl.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Step losses kept between two sums: a bound on what a long wait between lines holds.
constexpr std::size_t kFold = 1024;

std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  return buf;
}

class Progress : public wick::Hook {
 public:
  explicit Progress(const wick::Params& p)
      : every_(p.get_int("every")),
        redraw_s_(p.get_float("redraw_s")),
        mode_(p.get_string("mode")) {
    if (every_ < 1) throw p.error("every", "must be >= 1");
    if (redraw_s_ < 0) throw p.error("redraw_s", "must be >= 0");
  }

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context&) {
      if (mode_ == "auto") {
        const char* term = std::getenv("TERM");
        tty_ = ::isatty(STDOUT_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
      } else {
        tty_ = mode_ == "tty";
      }
    });
    r.on(wick::Point::before_epoch, [this](wick::Context& c) {
      epoch_start_ = last_draw_ = Clock::now();
      first_batch_ = c.state().batch_idx;
      epochs_ = c.state().epochs;
      samples_ = 0;
      reset_loss();
    });
    r.on(wick::Point::after_step, [this](wick::Context& c) {
      if (!c.state().training()) return;
      samples_ += c.state().batch_size * c.state().num_processes;
      const auto& loss = c.output().loss;
      if (loss.defined()) {
        losses_.push_back(loss.detach());
        if (losses_.size() >= kFold) fold_losses();
      }
      const auto now = Clock::now();
      const bool last = c.state().batch_idx + 1 == c.state().batches_in_epoch;
      if (tty_) {
        if (last || std::chrono::duration<double>(now - last_draw_).count() >= redraw_s_)
          draw(c, now);
      } else if ((c.state().batch_idx + 1) % every_ == 0 || last) {
        draw(c, now);
      }
    });
    r.on(wick::Point::before_valid, [this](wick::Context& c) {
      if (tty_) {
        std::printf("\r\033[K%s", to_width(head(c) + "  validating...").c_str());
        std::fflush(stdout);
        open_line_ = true;
      }
    });
    r.on(wick::Point::after_cancel, [this](wick::Context&) { end_line(); });
    r.on(wick::Point::after_fit, [this](wick::Context&) { end_line(); });
    r.on_record([this](const wick::Record& rec) {
      if (rec.kind != wick::Record::Kind::epoch) return;
      std::string line =
          "epoch " + std::to_string(rec.epoch + 1) + "/" + std::to_string(epochs_) + " done";
      auto t = rec.get("epoch_time_s");
      if (t) line += " in " + fmt("%.1f", *t) + " s";
      line += ":";
      std::vector<std::string> shown;  // a key logged twice (by a hook and the core) once
      for (const auto& [k, v] : rec.values) {
        if (k == "epoch_time_s" || std::find(shown.begin(), shown.end(), k) != shown.end())
          continue;
        shown.push_back(k);
        if (k == "samples_per_s")
          line += "  " + fmt("%.0f", v) + " samples/s";
        else if (k == "lr")
          line += "  lr " + fmt("%.3g", v);
        else if (k == "train/flops_per_s")
          line += "  " + flop_rate(v);
        else if (k == "train/flops_utilization")
          line += "  " + fmt("%.1f", 100 * v) + "% of peak";
        else
          line += "  " + k + " " + fmt("%.4f", v);
      }
      if (tty_) std::fputs("\r\033[K", stdout);
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      open_line_ = false;
    });
  }

 private:
  static std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
  }
  // 1.23e12 -> "1.2 TFLOP/s": the rate as people read it.
  static std::string flop_rate(double v) {
    static const char* kPrefix[] = {"", "k", "M", "G", "T", "P", "E"};
    std::size_t i = 0;
    while (std::abs(v) >= 1000 && i + 1 < std::size(kPrefix)) {
      v /= 1000;
      ++i;
    }
    return fmt(v < 10 ? "%.2g" : "%.3g", v) + " " + kPrefix[i] + "FLOP/s";
  }
  std::string head(wick::Context& c) const {
    return "epoch " + std::to_string(c.state().epoch + 1) + "/" + std::to_string(epochs_);
  }
  void reset_loss() {
    losses_.clear();
    loss_sum_ = at::Tensor();
    loss_count_ = 0;
  }
  // The kept losses into the running sum (in double): two kernels on a GPU, no wait.
  void fold_losses() {
    if (losses_.empty()) return;
    const at::Tensor sum = at::stack(losses_).sum(at::kDouble);
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + sum : sum;
    loss_count_ += static_cast<std::int64_t>(losses_.size());
    losses_.clear();
  }
  void draw(wick::Context& c, Clock::time_point now) {
    const auto& s = c.state();
    const double elapsed = std::chrono::duration<double>(now - epoch_start_).count();
    const std::int64_t done = s.batch_idx + 1 - first_batch_;
    const std::int64_t left = s.batches_in_epoch - (s.batch_idx + 1);
    std::string line = head(c) + "  step " + std::to_string(s.batch_idx + 1) + "/" +
                       std::to_string(s.batches_in_epoch);
    fold_losses();
    if (loss_count_ > 0) {
      // The one device sync of this line: the mean loss since the last line.
      line += "  loss " + fmt("%.4f", loss_sum_.item<double>() / static_cast<double>(loss_count_));
    }
    if (elapsed > 0)
      line += "  " + fmt("%.0f", static_cast<double>(samples_) / elapsed) + " samples/s";
    if (done > 0)
      line += "  eta " + hms(elapsed / static_cast<double>(done) * static_cast<double>(left));
    if (tty_) {
      std::printf("\r\033[K%s", to_width(line).c_str());
      open_line_ = true;
    } else {
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
    reset_loss();
    last_draw_ = now;
  }
  // A line redrawn in place must fit the terminal: one that wraps leaves its first rows behind
  // at every redraw. Read at each redraw, so a resized window is followed.
  static std::string to_width(std::string line) {
    winsize ws{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && line.size() >= ws.ws_col)
      line.resize(ws.ws_col - 1u);
    return line;
  }
  void end_line() {
    if (open_line_) {
      std::fputs("\n", stdout);
      std::fflush(stdout);
      open_line_ = false;
    }
  }

  std::int64_t every_;
  double redraw_s_;
  std::string mode_;
  bool tty_ = false;
  bool open_line_ = false;
  std::int64_t epochs_ = 0;
  std::int64_t first_batch_ = 0;
  std::int64_t samples_ = 0;
  Clock::time_point epoch_start_, last_draw_;
  std::vector<at::Tensor> losses_;  // since the last fold
  at::Tensor loss_sum_;             // of the losses folded since the last line
  std::int64_t loss_count_ = 0;
};

}  // namespace

WICK_PLUGIN(Progress,
            wick::PluginDef("progress", "1.0.0",
                            "Live progress line on a terminal, periodic lines in logs")
                .order(100)
                .main_process_only()
                .param_int("every", 100, "without a terminal: print a line every N steps")
                .param_float("redraw_s", 0.25, "on a terminal: redraw at most this often (s)")
                .param_choice("mode", {"auto", "tty", "plain"}, "auto",
                              "auto: a live line if stdout is a terminal, else plain lines"))
