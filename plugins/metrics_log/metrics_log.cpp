// metrics.csv beside the core's metrics.jsonl, from the same records (one row per logged step
// and per epoch). The header is every key seen so far: fixed columns first (kind, epoch, step,
// samples_seen, time_s), then metric keys in the order they first appeared. A row is appended
// while the keys are known; a record with a new key (say valid/accuracy at the first epoch
// end, or a hook that starts logging late) rewrites the whole file atomically with the wider
// header, so the file on disk is always a complete, rectangular CSV. Cells a record lacks are
// left empty. Rows are kept in memory (a few thousand per run).
#include <wick/wick.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kFixed = {"kind", "epoch", "step", "samples_seen", "time_s"};

std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return wick::number_text(v, 10);  // a '.' whatever locale a host program set
}

// A CSV cell: quoted when it holds a separator, a quote or a line break.
std::string cell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

class MetricsLog : public wick::Hook {
 public:
  explicit MetricsLog(const wick::Params& p)
      : file_(p.get_output_file("file")), steps_(p.get_bool("steps")) {}

  void connect(wick::Registrar& r) override {
    r.on(wick::Point::before_fit, [this](wick::Context&) {
      path_ = file_;
      columns_ = kFixed;
      rows_.clear();
      fs::create_directories(path_.parent_path());
      // The table is written anew at the first record (or at a resume's rewind), so that a fit
      // that fails before one leaves the earlier run's table as it was.
      started_ = false;
    });
    // A resumed run continues the table from its checkpoint: exactly the records the restored
    // run had written, so that rows a killed run wrote after it are not kept twice.
    r.on_rewind([this](const std::vector<wick::Record>& kept) {
      columns_ = kFixed;
      rows_.clear();
      for (const auto& rec : kept) add_row(rec);
      rewrite();
      started_ = true;
    });
    r.on_record([this](const wick::Record& rec) {
      if (path_.empty()) return;
      if (!started_) {  // the first record of a fresh run, a row or not
        started_ = true;
        add_row(rec);
        rewrite();
        return;
      }
      if (!add_row(rec)) return;
      if (widened_) {
        rewrite();
      } else {
        std::ofstream out(path_, std::ios::app);
        out << line(rows_.back());
        out.flush();
        if (!out) throw std::runtime_error("cannot append to '" + path_.string() + "'");
      }
    });
  }

 private:
  // Adds the row of a record (false when this table leaves it out); widened_ tells whether it
  // brought a new column.
  bool add_row(const wick::Record& rec) {
    widened_ = false;
    if (!steps_ && rec.kind == wick::Record::Kind::step) return false;
    std::vector<std::pair<std::string, std::string>> row = {
        {"kind", rec.kind == wick::Record::Kind::step ? "step" : "epoch"},
        {"epoch", std::to_string(rec.epoch)},
        {"step", std::to_string(rec.step)},
        {"samples_seen", std::to_string(rec.samples_seen)},
        {"time_s", number(rec.time_s)}};
    for (const auto& [k, v] : rec.values) {
      row.emplace_back(k, number(v));
      if (std::find(columns_.begin(), columns_.end(), k) == columns_.end()) {
        columns_.push_back(k);
        widened_ = true;
      }
    }
    rows_.push_back(std::move(row));
    return true;
  }

  std::string header() const {
    std::string s;
    for (std::size_t i = 0; i < columns_.size(); ++i) s += (i ? "," : "") + cell(columns_[i]);
    return s + "\n";
  }
  std::string line(const std::vector<std::pair<std::string, std::string>>& row) const {
    std::string s;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i) s += ",";
      for (const auto& [k, v] : row)
        if (k == columns_[i]) {
          s += cell(v);
          break;
        }
    }
    return s + "\n";
  }
  void rewrite() {
    std::string text = header();
    for (const auto& row : rows_) text += line(row);
    wick::write_file_atomic(path_.string(), text);
  }
  std::string file_;
  bool steps_;
  bool widened_ = false;
  bool started_ = false;  // the table was written anew this fit
  fs::path path_;
  std::vector<std::string> columns_;
  std::vector<std::vector<std::pair<std::string, std::string>>> rows_;
};

}  // namespace

WICK_PLUGIN(MetricsLog,
            wick::PluginDef("metrics_log", "2.0.0",
                            "metrics.csv beside metrics.jsonl (one row per step and epoch record)")
                .order(90)
                .main_process_only()
                .param_string("file", "metrics.csv", "CSV file, relative to the run directory")
                .param_bool("steps", true, "include the step records (false: epoch rows only)"))
