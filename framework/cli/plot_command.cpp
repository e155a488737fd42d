// `wick plot RUN_DIR [-o FILE.png]`: loss and accuracy curves from a run's metrics.jsonl,
// drawn by gnuplot (Debian package gnuplot-nox) into a PNG of fixed size. Four panels: loss
// and accuracy, each by optimizer step (step records as lines, epoch ends as points) and by
// epoch. Any key ending in "loss" or "accuracy" is drawn, so tasks and hooks that log more
// (train/accuracy, say) get their curves too. A confusion matrix the confusion_matrix metric
// wrote (NAME.csv) is drawn as a heatmap, NAME.png beside it.
//
// Nothing read from the run becomes gnuplot code: values are numbers we format, titles are
// single-quoted literals (no backquote or macro substitution) with control characters
// replaced, and gnuplot writes into a private temporary folder whose name we generate; the
// PNG is then copied to its destination by this program.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "commands.hpp"
#include "gnuplot.hpp"
#include "wick/params.hpp"

namespace fs = std::filesystem;

namespace wick::cli {

namespace {

struct Point2 {
  double x, y;
};
// One curve: its title and its points, in file order.
using Series = std::map<std::string, std::vector<Point2>>;

struct Curves {
  Series loss_by_step, loss_by_epoch, acc_by_step, acc_by_epoch;
  std::map<std::string, int> color;  // one colour per key, in every panel
  double max_epoch = 0;
  std::size_t records = 0;
};

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                               "#9467bd", "#8c564b", "#e377c2", "#17becf"};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Curves read_curves(const fs::path& file) {
  // Only a regular file: a FIFO or a device (a link to /dev/zero, say) would never end.
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::runtime_error("'" + file.string() + "' is not a regular file");
  std::error_code ec;
  if (!fs::exists(file, ec))  // a wrong argument: exit 2, as for every command
    throw ConfigError("no '" + file.string() +
                      "'; give the run directory of a `wick fit` (trainer.output_dir)");
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read '" + file.string() + "'");
  Curves c;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      throw std::runtime_error(file.string() + ":" + std::to_string(lineno) +
                               ": not a JSON object; is this a wick metrics.jsonl?");
    }
    if (!j.is_object() || !j.contains("step") || !j.contains("kind")) continue;
    if (!j["step"].is_number() || (j.contains("epoch") && !j["epoch"].is_number()))
      throw std::runtime_error(file.string() + ":" + std::to_string(lineno) +
                               ": 'step' and 'epoch' must be numbers");
    const bool epoch = j["kind"] == "epoch";
    const double step = j["step"].get<double>();
    const double ep = j.value("epoch", 0.0) + 1.0;  // epochs are 0-based in the records
    if (!std::isfinite(step) || !std::isfinite(ep)) continue;
    ++c.records;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.value().is_number()) continue;  // null: a non-finite value
      const std::string& k = it.key();
      const double v = it.value().get<double>();
      if (!std::isfinite(v)) continue;
      const bool is_loss = ends_with(k, "loss"), is_acc = ends_with(k, "accuracy");
      if (!is_loss && !is_acc) continue;
      // A key both in step and epoch records (train/loss) is two curves: per-step and mean.
      const std::string title = epoch ? k + " (epoch)" : k;
      c.color.emplace(k, static_cast<int>(c.color.size() % std::size(kColors)));
      if (epoch) c.max_epoch = std::max(c.max_epoch, ep);
      (is_loss ? c.loss_by_step : c.acc_by_step)[title].push_back({step, v});
      if (epoch) (is_loss ? c.loss_by_epoch : c.acc_by_epoch)[k].push_back({ep, v});
    }
  }
  return c;
}

// One panel: its data blocks and plot command, or an empty frame that says why.
void panel(std::ostringstream& gp, const Curves& c, const Series& series, const std::string& title,
           bool by_epoch, const std::string& ylabel, int& block) {
  gp << "set title " << quote(title) << "\nset xlabel "
     << quote(by_epoch ? "epoch" : "optimizer step") << "\nset ylabel " << quote(ylabel) << "\n";
  // Loss falls and accuracy rises: keep the legend where the curves usually are not.
  gp << (ylabel == "accuracy" ? "set key bottom right\n" : "set key top right\n");
  // Whole epochs on the axis while they fit.
  gp << (by_epoch && c.max_epoch <= 20 ? "set xtics 1\n" : "set xtics autofreq\n");
  if (series.empty()) {
    gp << "set label 1 " << quote("nothing recorded") << " at graph 0.5, 0.5 center\n"
       << "plot [0:1] [0:1] NaN notitle\nunset label 1\n";
    return;
  }
  std::vector<std::string> parts;
  for (const auto& [name, pts] : series) {
    const std::string id = "$d" + std::to_string(block++);
    gp << id << " << EOD\n";
    for (const auto& p : pts) gp << p.x << ' ' << p.y << '\n';
    gp << "EOD\n";
    // Step records are dense: lines; epoch values are few: lines with points (dashed when
    // beside the per-step curve of the same key).
    const bool epoch_mean = ends_with(name, " (epoch)");
    const std::string key = epoch_mean ? name.substr(0, name.size() - 8) : name;
    const bool dots = by_epoch || epoch_mean || pts.size() == 1;
    const auto col = c.color.count(key) ? c.color.at(key) : 0;
    parts.push_back(id + " using 1:2 with " + (dots ? "linespoints pt 7 ps 0.8" : "lines") +
                    " lw 2 lc rgb \"" + kColors[col] + "\"" +
                    (epoch_mean && series.count(key) ? " dt 2" : "") + " title " + quote(name));
  }
  gp << "plot ";
  for (std::size_t i = 0; i < parts.size(); ++i) gp << (i ? ", \\\n     " : "") << parts[i];
  gp << "\n";
}

// A confusion matrix written by the confusion_matrix metric: a header "true/predicted,0,1,..."
// and one row of counts per true class. Empty when `file` is not one (or is malformed, which
// is then said on stderr): other CSV files in a run folder are not ours to judge.
std::vector<std::vector<long long>> read_confusion(const fs::path& file) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(file, ec)) || fs::file_size(file, ec) > (4u << 20))
    return {};
  std::ifstream in(file);
  std::string line;
  if (!std::getline(in, line) || line.rfind("true/predicted,", 0) != 0) return {};
  const auto columns = static_cast<std::size_t>(std::count(line.begin(), line.end(), ','));
  std::vector<std::vector<long long>> m;
  while (std::getline(in, line) && m.size() <= columns) {
    std::istringstream cells(line);
    std::vector<long long> row;
    std::string cell;
    std::getline(cells, cell, ',');  // the true class
    for (long long v; std::getline(cells, cell, ',');) {
      char* end = nullptr;
      v = std::strtoll(cell.c_str(), &end, 10);
      if (cell.empty() || *end != '\0' || v < 0) break;
      row.push_back(v);
    }
    if (row.size() != columns) {
      std::fprintf(stderr, "wick: plot: skipping '%s': row %zu is not %zu counts\n", file.c_str(),
                   m.size() + 1, columns);
      return {};
    }
    m.push_back(std::move(row));
  }
  if (m.size() != columns) {
    std::fprintf(stderr, "wick: plot: skipping '%s': %zu rows for %zu classes\n", file.c_str(),
                 m.size(), columns);
    return {};
  }
  return m;
}

// The heatmap of a confusion matrix: rows true classes top-down, columns predicted, counts
// written in the cells while they fit.
std::string heatmap(const std::vector<std::vector<long long>>& m, const std::string& title) {
  const auto n = m.size();
  std::ostringstream gp;
  gp << "set title " << quote(title) << "\nset xlabel 'predicted class'\n"
     << "set ylabel 'true class'\nset size ratio -1\nset view map\nunset key\n"
     << "set xrange [-0.5:" << n - 0.5 << "]\nset yrange [" << n - 0.5 << ":-0.5]\n"
     << (n <= 30 ? "set xtics 1\nset ytics 1\n" : "")
     << "set palette defined (0 '#ffffff', 1 '#1f77b4')\n$m << EOD\n";
  for (const auto& row : m) {
    for (std::size_t j = 0; j < row.size(); ++j) gp << (j ? " " : "") << row[j];
    gp << "\n";
  }
  gp << "EOD\nplot $m matrix with image";
  if (n <= 20) gp << ", $m matrix using 1:2:(sprintf('%d', int($3))) with labels";
  gp << "\n";
  return gp.str();
}

struct PlotArgs {
  std::string run_dir, output;
  int width = 1200, height = 800;
};

int cmd_plot(const PlotArgs& a) {
  return guarded([&] {
    const fs::path dir(a.run_dir);
    const fs::path out = a.output.empty() ? dir / "curves.png" : fs::path(a.output);
    Curves c = read_curves(dir / "metrics.jsonl");
    if (const auto parent = fs::absolute(out).parent_path(); !fs::is_directory(parent))
      throw std::runtime_error("cannot write '" + out.string() + "': no folder '" +
                               parent.string() + "'");
    if (c.records == 0)
      throw std::runtime_error((dir / "metrics.jsonl").string() +
                               ": no records yet; train first (`wick fit CONFIG`)");

    std::ostringstream gp;
    gp.precision(10);
    gp << "set grid\nset datafile missing NaN\n"
       << "set multiplot layout 2,2 title " << quote("wick run " + dir.string()) << "\n";
    int block = 0;
    panel(gp, c, c.loss_by_step, "loss by step", false, "loss", block);
    panel(gp, c, c.loss_by_epoch, "loss by epoch", true, "loss", block);
    panel(gp, c, c.acc_by_step, "accuracy by step", false, "accuracy", block);
    panel(gp, c, c.acc_by_epoch, "accuracy by epoch", true, "accuracy", block);
    gp << "unset multiplot\n";
    render(gp.str(), out, a.width, a.height);
    std::printf("wick: plot %s (%dx%d)\n", out.string().c_str(), a.width, a.height);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() != ".csv") continue;
      const auto m = read_confusion(e.path());
      if (m.empty()) continue;
      auto png = e.path();
      png.replace_extension(".png");
      render(heatmap(m, "confusion matrix " + e.path().stem().string() + " of " + dir.string()),
             png, 800, 760);
      std::printf("wick: plot %s (heatmap of %s)\n", png.c_str(), e.path().filename().c_str());
    }
    const std::string summary = run_summary_line(dir.string());
    if (!summary.empty()) std::printf("%s\n", summary.c_str());
    return kOk;
  });
}

}  // namespace

std::string run_summary_line(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "summary.json");
  if (!in) return "";
  nlohmann::json s;
  try {
    s = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    return "";
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "wick: %s: %lld epoch%s, %lld steps in %.1f s, %.0f samples/s",
                s.value("status", "?").c_str(), s.value("epochs", 0LL),
                s.value("epochs", 0LL) == 1 ? "" : "s", s.value("optimizer_steps", 0LL),
                s.value("wall_s", 0.0), s.value("train_samples_per_s", 0.0));
  std::string line = buf;
  for (auto it = s.begin(); it != s.end(); ++it)
    if (it.key().rfind("valid/", 0) == 0 && it.value().is_number()) {
      std::snprintf(buf, sizeof buf, ", %s %.4f", it.key().c_str(), it.value().get<double>());
      line += buf;
    }
  return line;
}

void add_plot_command(CLI::App& app, Registry& r) {
  static PlotArgs args;
  auto* plot = app.add_subcommand(
      "plot",
      "draw loss and accuracy curves of a run (metrics.jsonl) to a PNG with gnuplot, and each "
      "confusion matrix of the confusion_matrix metric (NAME.csv) as a heatmap NAME.png");
  plot->add_option("RUN_DIR", args.run_dir, "run directory (trainer.output_dir)")->required();
  plot->add_option("-o,--output", args.output, "PNG file (default: RUN_DIR/curves.png)");
  plot->add_option("--width", args.width, "image width in pixels")
      ->check(CLI::Range(200, 10000))
      ->capture_default_str();
  plot->add_option("--height", args.height, "image height in pixels")
      ->check(CLI::Range(200, 10000))
      ->capture_default_str();
  r.push_back({plot, [] { return cmd_plot(args); }});
}

}  // namespace wick::cli
