// metrics.csv beside the core's metrics.jsonl, from the same records (one row per logged step
// and per epoch). The header is every key seen so far: fixed columns first (kind, epoch, step,
// samples_seen, time_s), then metric keys in the order they first appeared. A row is appended
// while the keys are known; a record with a new key (say valid/accuracy at the first epoch
// end, or a hook that starts logging late) rewrites the file atomically with the wider header
// and every earlier row given empty cells for the new columns (which come last), so the file
// on disk is always a complete, rectangular CSV. Nothing of the rows is kept in memory: a
// long run's table grows on disk only.
#include <wick/wick.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
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
      fs::create_directories(path_.parent_path());
      // The table is written anew at the first record (or at a resume's rewind), so that a fit
      // that fails before one leaves the earlier run's table as it was.
      started_ = false;
    });
    // A resumed run continues the table from its checkpoint: exactly the records the restored
    // run had written, so that rows a killed run wrote after it are not kept twice.
    r.on_rewind([this](const std::vector<wick::Record>& kept) {
      columns_ = kFixed;
      for (const auto& rec : kept) add_columns(rec);
      std::string rows;
      for (const auto& rec : kept)
        if (wanted(rec)) rows += line(rec);
      write_table(rows);
      started_ = true;
    });
    r.on_record([this](const wick::Record& rec) {
      if (path_.empty()) return;
      if (!started_) {  // the first record of a fresh run, a row or not
        started_ = true;
        add_columns(rec);
        write_table(wanted(rec) ? line(rec) : "");
        return;
      }
      if (!wanted(rec)) return;
      add_columns(rec);
      std::error_code ec;
      if (!fs::exists(path_, ec))  // removed while the fit runs: a table again from here
        write_table("");
      else if (columns_.size() > written_)
        widen();
      std::ofstream out(path_, std::ios::app);
      out << line(rec);
      out.flush();
      if (!out) throw std::runtime_error("cannot append to '" + path_.string() + "'");
    });
  }

 private:
  bool wanted(const wick::Record& rec) const {
    return steps_ || rec.kind != wick::Record::Kind::step;
  }
  // The columns of a row of this table: a key first seen is added last.
  void add_columns(const wick::Record& rec) {
    if (!wanted(rec)) return;
    for (const auto& kv : rec.values)
      if (std::find(columns_.begin(), columns_.end(), kv.first) == columns_.end())
        columns_.push_back(kv.first);
  }

  // The header of the first n columns.
  std::string header(std::size_t n) const {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += (i ? "," : "") + cell(columns_[i]);
    return s + "\n";
  }
  // The file as the header of every column so far, then `rows`.
  void write_table(const std::string& rows) {
    wick::write_file_atomic(path_.string(), header(columns_.size()) + rows);
    written_ = columns_.size();
  }
  std::string line(const wick::Record& rec) const {
    std::string s = std::string(rec.kind == wick::Record::Kind::step ? "step" : "epoch") + "," +
                    std::to_string(rec.epoch) + "," + std::to_string(rec.step) + "," +
                    std::to_string(rec.samples_seen) + "," + number(rec.time_s);
    for (std::size_t i = kFixed.size(); i < columns_.size(); ++i) {
      s += ",";
      for (const auto& [k, v] : rec.values)
        if (k == columns_[i]) {
          s += number(v);
          break;
        }
    }
    return s + "\n";
  }
  // The file on disk with the columns added since it was written: the new header, and each
  // row (a line break inside a quoted cell is no row's end) with as many empty cells more. A
  // first line other than the header written (a file someone replaced) is taken for a row.
  void widen() {
    std::ifstream in(path_, std::ios::binary);
    const std::string old((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) throw std::runtime_error("cannot read '" + path_.string() + "'");
    const std::string written = header(written_), pad(columns_.size() - written_, ',');
    bool quoted = false, in_header = old.compare(0, written.size(), written) == 0;
    std::string rows;
    std::size_t row_start = 0;
    for (std::size_t i = 0; i < old.size(); ++i) {
      if (old[i] == '"') quoted = !quoted;
      if (old[i] != '\n' || quoted) continue;
      if (!in_header) rows += old.substr(row_start, i - row_start) + pad + "\n";
      in_header = false;
      row_start = i + 1;
    }
    write_table(rows);
  }

  std::string file_;
  bool steps_;
  bool started_ = false;  // the table was written anew this fit
  fs::path path_;
  std::vector<std::string> columns_;
  std::size_t written_ = 0;  // the columns of the header on disk
};

}  // namespace

WICK_PLUGIN(MetricsLog,
            wick::PluginDef("metrics_log", "2.0.0",
                            "metrics.csv beside metrics.jsonl (one row per step and epoch record)")
                .order(90)
                .main_process_only()
                .param_string("file", "metrics.csv", "CSV file, relative to the run directory")
                .param_bool("steps", true, "include the step records (false: epoch rows only)"))
