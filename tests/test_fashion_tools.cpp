// The progress display (under a pseudo-terminal and in plain mode), metrics.csv from
// metrics_log, and `wick plot` on a recorded run.
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include "support.hpp"

using namespace wick::test;

namespace {

// The synthetic task: 256 samples in batches of 32 = 8 steps per epoch.
std::string config(const TempDir& dir, const std::string& hooks, int epochs = 2) {
  return "[trainer]\nepochs = " + std::to_string(epochs) +
         "\nbatch_size = 32\nlog_every = 4\noutput_dir = \"" + (dir / "run").string() +
         "\"\n[task]\nplugin = \"synthetic\"\nsamples = 256\nvalid_samples = 64\n" + hooks;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// Runs wick with stdout and stderr on a pseudo-terminal (`cols` wide; 0: no size set);
// returns what the terminal showed.
std::string run_wick_on_pty(const std::vector<std::string>& args, int& exit_code,
                            unsigned short cols = 0) {
  int master = -1;
  winsize size{};
  size.ws_row = 24;
  size.ws_col = cols;
  pid_t pid = forkpty(&master, nullptr, nullptr, cols ? &size : nullptr);
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setenv("TERM", "xterm", 1);
    std::vector<char*> argv = {const_cast<char*>(WICK_BIN)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(WICK_BIN, argv.data());
    _exit(127);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(master, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EIO once the child has closed the terminal
    }
  }
  close(master);
  int status = 0;
  waitpid(pid, &status, 0);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

TEST_CASE("progress redraws one line in place on a terminal") {
  TempDir dir;
  // redraw_s = 0: a redraw after every step, so the count is known.
  write_file(dir / "cfg.toml", config(dir, "[[hooks]]\nplugin = \"progress\"\nredraw_s = 0.0\n"));
  int rc = -1;
  auto out = run_wick_on_pty({"fit", (dir / "cfg.toml").string()}, rc);
  INFO(out);
  REQUIRE(rc == 0);
  // Each redraw returns to the start of the line and clears it: 8 steps + "validating" per
  // epoch, and the epoch line replaces the live one.
  CHECK(count(out, "\r\033[Kepoch 1/2  step ") == 8);
  CHECK(count(out, "\r\033[Kepoch 2/2  step ") == 8);
  CHECK(count(out, "validating...") == 2);
  CHECK_THAT(out, Catch::Contains("\r\033[Kepoch 1/2  step 8/8  loss "));
  CHECK_THAT(out, Catch::Contains("samples/s  eta 0:00"));
  CHECK(count(out, "\r\033[Kepoch 2/2 done in ") == 1);
  // Live lines are never ended by a newline: the only line ends are the epoch lines, the
  // final summary lines of `wick fit` and nothing else.
  const auto live = out.find("epoch 1/2");  // after the model summary `wick fit` starts with
  REQUIRE(live != std::string::npos);
  auto before_summary = out.substr(live, out.find("wick: completed") - live);
  CHECK(count(before_summary, "\n") == 2);
  CHECK_THAT(out, Catch::Contains("valid/accuracy "));
}

TEST_CASE("progress cuts its redrawn line to the terminal's width") {
  TempDir dir;
  write_file(dir / "cfg.toml", config(dir, "[[hooks]]\nplugin = \"progress\"\nredraw_s = 0.0\n"));
  int rc = -1;
  auto out = run_wick_on_pty({"fit", (dir / "cfg.toml").string()}, rc, 30);
  INFO(out);
  REQUIRE(rc == 0);
  // Every live line: what follows "\r\033[K" up to the next redraw. (An epoch's line ends
  // with a line end, "\r\n" on a terminal, and stays: it may wrap.)
  const std::string redraw = "\r\033[K";
  std::size_t lines = 0;
  for (auto p = out.find(redraw); p != std::string::npos; p = out.find(redraw, p + 1)) {
    const auto from = p + redraw.size();
    const auto end = out.find_first_of("\r\n", from);
    if (end == std::string::npos || out.compare(end, redraw.size(), redraw) != 0) continue;
    INFO(out.substr(from, end - from));
    CHECK(end - from <= 29);
    ++lines;
  }
  CHECK(lines >= 16);  // the steps' lines were there, cut
  CHECK(count(out, "\r\033[Kepoch 1/2  step ") == 8);
}

TEST_CASE("progress prints plain lines every N steps when stdout is not a terminal") {
  TempDir dir;
  write_file(dir / "cfg.toml", config(dir, "[[hooks]]\nplugin = \"progress\"\nevery = 3\n"));
  // A step record every 3 steps too: its train/loss is the mean over the same steps as a line's.
  auto r = run_wick({"fit", (dir / "cfg.toml").string(), "--set", "trainer.log_every=3"},
                    {"TERM=xterm"});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find('\r') == std::string::npos);
  CHECK(r.out.find('\033') == std::string::npos);
  // Steps 3, 6 and the last one (8) of each epoch.
  for (std::string e : {"1/2", "2/2"}) {
    CHECK_THAT(r.out, Catch::Contains("epoch " + e + "  step 3/8  loss "));
    CHECK_THAT(r.out, Catch::Contains("epoch " + e + "  step 6/8  loss "));
    CHECK_THAT(r.out, Catch::Contains("epoch " + e + "  step 8/8  loss "));
  }
  CHECK(count(r.out, "  step ") == 6);
  CHECK(count(r.out, " done in ") == 2);
  // A line's loss is the mean of the step losses since the line before (printed to 4 places).
  std::map<std::int64_t, double> logged;
  for (const auto& rec : read_jsonl(dir / "run" / "metrics.jsonl"))
    if (rec["kind"] == "step") logged[rec["step"].get<std::int64_t>()] = rec["train/loss"];
  for (const std::int64_t step : {3, 6}) {
    const std::string at = "epoch 1/2  step " + std::to_string(step) + "/8  loss ";
    const auto p = r.out.find(at);
    REQUIRE(p != std::string::npos);
    REQUIRE(logged.count(step));
    INFO("step " << step);
    CHECK(std::abs(std::stod(r.out.substr(p + at.size(), 6)) - logged[step]) <= 5.1e-5);
  }
  CHECK(count(r.out, "valid/accuracy ") >= 2);
}

TEST_CASE("metrics_log writes metrics.csv with the records of metrics.jsonl") {
  TempDir dir;
  // metrics.csv holds the rows of the last `rows` records of metrics.jsonl, rectangular, and
  // under a header of every key (late/x, which comes last, last).
  auto check_table = [&](std::size_t rows) {
    auto jsonl = read_jsonl(dir / "run" / "metrics.jsonl");
    auto lines = split(read_file(dir / "run" / "metrics.csv"), '\n');
    REQUIRE(lines.back().empty());  // ends with a newline
    lines.pop_back();
    REQUIRE(rows <= jsonl.size());
    REQUIRE(lines.size() == rows + 1);
    auto header = split(lines[0], ',');
    REQUIRE(header.size() >= 6);
    CHECK(std::vector<std::string>(header.begin(), header.begin() + 5) ==
          std::vector<std::string>{"kind", "epoch", "step", "samples_seen", "time_s"});
    CHECK(header.back() == "late/x");  // seen last
    bool saw_late = false;
    for (std::size_t i = 0; i < rows; ++i) {
      const auto& j = jsonl[jsonl.size() - rows + i];
      auto cells = split(lines[i + 1], ',');
      REQUIRE(cells.size() == header.size());
      for (std::size_t c = 0; c < header.size(); ++c) {
        INFO("row " << i << " column " << header[c]);
        if (!j.contains(header[c])) {
          CHECK(cells[c].empty());
        } else if (j[header[c]].is_string()) {
          CHECK(cells[c] == j[header[c]].get<std::string>());
        } else {
          CHECK(std::stod(cells[c]) == Approx(j[header[c]].get<double>()).epsilon(1e-9));
        }
      }
      saw_late = saw_late || j.contains("late/x");
    }
    CHECK(saw_late);
    CHECK_FALSE(jsonl[0].contains("late/x"));
    return jsonl.size();
  };
  // late_key logs "late/x" from the second epoch on: the header must widen.
  const std::string hooks = test_plugins_toml() +
                            "[[hooks]]\nplugin = \"metrics_log\"\n"
                            "[[hooks]]\nplugin = \"late_key\"\n";
  write_file(dir / "cfg.toml", config(dir, hooks));
  auto r = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  const std::size_t records = check_table(read_jsonl(dir / "run" / "metrics.jsonl").size());
  // metrics.csv removed at step 14, after the last new column (late/x, at step 12): a table
  // again, with its header, from the next record (step 16) on.
  write_file(dir / "cfg.toml",
             config(dir, hooks + "[[hooks]]\nplugin = \"fault\"\naction = \"remove\"\n"
                                 "path = \"metrics.csv\"\nstep = 14\n"));
  auto removed = run_wick({"fit", (dir / "cfg.toml").string()});
  INFO(removed.err << removed.out);
  REQUIRE(removed.exit_code == 0);
  CHECK(check_table(2) == records);
}

TEST_CASE("wick plot draws a PNG of the requested size from a recorded run") {
  need_program("gnuplot", "gnuplot-nox");
  TempDir dir;
  write_file(dir / "cfg.toml", config(dir, "", 3));
  auto fit = run_wick({"fit", (dir / "cfg.toml").string()});
  REQUIRE(fit.exit_code == 0);

  auto png_size = [](const fs::path& p) {
    auto b = read_file(p);
    REQUIRE(b.size() > 24);
    REQUIRE(b.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
    REQUIRE(b.substr(12, 4) == "IHDR");
    auto be = [&](std::size_t o) {
      std::uint32_t v = 0;
      for (int i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(b[o + i]);
      return v;
    };
    return std::make_pair(be(16), be(20));
  };

  auto r = run_wick({"plot", (dir / "run").string()});
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(png_size(dir / "run" / "curves.png") == std::make_pair(1200u, 800u));
  CHECK_THAT(r.out, Catch::Contains("curves.png (1200x800)"));
  CHECK_THAT(r.out, Catch::Contains("wick: completed: 3 epochs"));
  CHECK_FALSE(fs::exists(dir / "run" / "curves.png.tmp"));

  auto r2 = run_wick({"plot", (dir / "run").string(), "-o", (dir / "small.png").string(), "--width",
                      "640", "--height", "480"});
  REQUIRE(r2.exit_code == 0);
  CHECK(png_size(dir / "small.png") == std::make_pair(640u, 480u));
}

TEST_CASE("wick plot explains a missing gnuplot and a missing run") {
  TempDir dir;
  write_file(dir / "run" / "metrics.jsonl",
             "{\"kind\":\"epoch\",\"epoch\":0,\"step\":4,\"samples_seen\":128,\"time_s\":0.1,"
             "\"train/loss\":1.5,\"valid/loss\":1.4,\"valid/accuracy\":0.5}\n");
  auto r = run_wick({"plot", (dir / "run").string()}, {"PATH=" + (dir / "empty").string()});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("gnuplot not found"));
  CHECK_THAT(r.err, Catch::Contains("apt-get install gnuplot-nox"));

  auto r2 = run_wick({"plot", (dir / "nothing").string()});
  CHECK(r2.exit_code == 2);  // a wrong argument, as for every command
  CHECK_THAT(r2.err, Catch::Contains("no '" + (dir / "nothing" / "metrics.jsonl").string() +
                                     "'; give the run directory of a `wick fit`"));

  write_file(dir / "bad" / "metrics.jsonl", "{\"kind\":\"step\"}\nnot json\n");
  auto r3 = run_wick({"plot", (dir / "bad").string()});
  CHECK(r3.exit_code == 1);
  CHECK_THAT(r3.err, Catch::Contains("metrics.jsonl:2: not a JSON object"));
}
