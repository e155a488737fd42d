// `wick lr-find CONFIG`: the learning-rate finder (wick/tuning.hpp) with its CSV and PNG in
// the run folder.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "commands.hpp"
#include "gnuplot.hpp"
#include "wick/config.hpp"
#include "wick/files.hpp"
#include "wick/trainer.hpp"
#include "wick/tuning.hpp"

namespace fs = std::filesystem;

namespace wick::cli {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string short_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string csv(const LrFindResult& r) {
  std::string out = "batch,lr,loss,smoothed_loss\n";
  for (const auto& p : r.points)
    out +=
        std::to_string(p.step) + "," + num(p.lr) + "," + num(p.loss) + "," + num(p.smoothed) + "\n";
  return out;
}

// The smoothed loss against the learning rate (log scale), the raw losses faint behind it and
// the suggestion marked. The y range ends a little above the first smoothed value: the
// divergence at the end would flatten everything else.
void plot(const LrFindResult& r, const fs::path& png) {
  std::ostringstream gp;
  double lo = r.points.front().smoothed, first = lo;
  for (const auto& p : r.points)
    for (double v : {p.loss, p.smoothed})
      if (std::isfinite(v)) lo = std::min(lo, v);
  gp << "set logscale x\nset format x '%.0e'\nset grid\nset key top left\n"
     << "set title " << quote("wick lr-find") << "\nset xlabel " << quote("learning rate")
     << "\nset ylabel " << quote("training loss") << "\n";
  if (std::isfinite(first) && first > lo)
    gp << "set yrange [" << num(lo - 0.1 * (first - lo)) << ":" << num(first + 0.25 * (first - lo))
       << "]\n";
  gp << "$d << EOD\n";
  for (const auto& p : r.points)
    gp << num(p.lr) << ' ' << (std::isfinite(p.loss) ? num(p.loss) : "NaN") << ' '
       << (std::isfinite(p.smoothed) ? num(p.smoothed) : "NaN") << '\n';
  gp << "EOD\n";
  if (r.suggestion > 0)
    gp << "$s << EOD\n"
       << num(r.suggestion) << ' ' << num(r.points[r.suggestion_step].smoothed) << "\nEOD\n";
  gp << "plot $d using 1:2 with points pt 7 ps 0.4 lc rgb '#a0a0a0' title 'loss', \\\n"
     << "     $d using 1:3 with lines lw 2 lc rgb '#1f77b4' title 'smoothed'";
  if (r.suggestion > 0)
    gp << ", \\\n     $s using 1:2 with points pt 7 ps 1.5 lc rgb '#d62728' title "
       << quote("suggested " + short_num(r.suggestion));
  gp << "\n";
  render(gp.str(), png, 800, 500);
}

int cmd_lr_find(const ConfigArgs& a, const LrFindOptions& o) {
  return guarded([&] {
    check_lr_find_options(o);
    auto cfg = Config::load(a.config, a.sets);
    PluginFinder finder(cfg.search_path(absolute_all(a.plugin_paths)));
    std::fprintf(stderr, "wick lr-find: %lld batches, learning rate %s to %s\n",
                 static_cast<long long>(o.steps), short_num(o.start).c_str(),
                 short_num(o.end).c_str());
    const auto r = find_lr(cfg, finder, o);
    if (interrupt_requested()) return 128 + interrupt_signal();
    if (!r.left_out.empty()) {
      std::string names;
      for (const auto& n : r.left_out) names += (names.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "wick lr-find: left out (they do not change how a step trains): %s\n",
                   names.c_str());
    }
    const fs::path dir = cfg.trainer().output_dir;
    fs::create_directories(dir);
    write_file_atomic(dir / "lr_find.csv", csv(r));
    bool png = true;
    try {
      plot(r, dir / "lr_find.png");
    } catch (const GnuplotMissing& e) {
      png = false;
      std::fprintf(stderr, "wick lr-find: no lr_find.png: %s\n", e.what());
    }
    const auto& last = r.points.back();
    std::printf("wick lr-find: %zu batches, learning rate %s to %s%s\n", r.points.size(),
                short_num(r.points.front().lr).c_str(), short_num(last.lr).c_str(),
                r.diverged ? " (stopped: the smoothed loss diverged)" : "");
    std::printf("wick lr-find: lowest smoothed loss %s at learning rate %s\n",
                short_num(r.min_loss).c_str(), short_num(r.min_loss_lr).c_str());
    std::printf("wick lr-find: wrote %s%s%s\n", (dir / "lr_find.csv").c_str(), png ? " and " : "",
                png ? (dir / "lr_find.png").c_str() : "");
    if (r.suggestion <= 0) {
      std::printf(
          "wick lr-find: no descent of the loss found; start lower (--start) or ramp over more "
          "batches (--steps)\n");
      return kFailed;
    }
    std::printf(
        "wick lr-find: suggested learning rate %s (steepest descent of the smoothed "
        "loss, batch %lld)\n",
        short_num(r.suggestion).c_str(), static_cast<long long>(r.suggestion_step));
    return kOk;
  });
}

}  // namespace

void add_lr_find_command(CLI::App& app, Registry& r) {
  static ConfigArgs args;
  static LrFindOptions o;
  auto* cmd = app.add_subcommand(
      "lr-find",
      "learning-rate finder: raise the learning rate exponentially over training batches of "
      "a throwaway copy of the run (checkpoints, logs and schedules left out; nothing of a "
      "later fit depends on it) until the loss diverges; prints the suggested rate (steepest "
      "descent of the smoothed loss) and writes lr_find.csv and lr_find.png (with gnuplot) "
      "into the run folder");
  add_config_args(cmd, args);
  cmd->add_option("--start", o.start, "learning rate of the first batch")->capture_default_str();
  cmd->add_option("--end", o.end, "learning rate of the last batch")->capture_default_str();
  cmd->add_option("--steps", o.steps, "batches of the ramp")->capture_default_str();
  r.push_back({cmd, [] { return cmd_lr_find(args, o); }});
}

}  // namespace wick::cli
