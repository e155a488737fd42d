// Running gnuplot: see gnuplot.hpp.
#include "gnuplot.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

extern char** environ;

namespace fs = std::filesystem;

namespace wick::cli {

// Any text as a gnuplot string literal that stays one: single quotes (gnuplot substitutes
// backquoted commands and @macros in double-quoted strings, never in single-quoted ones), a
// quote doubled, control characters (a newline would end the command) shown as '?', and at
// most 200 characters.
std::string quote(const std::string& s) {
  std::string out = "'";
  std::size_t n = 0;
  for (char ch : s) {
    if (++n > 200) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f)
      out += '?';
    else if (ch == '\'')
      out += "''";
    else
      out += ch;
  }
  return out + "'";
}

namespace {

// Runs gnuplot on a script file; returns its exit status, or -1 with errno when it did not start.
int run_gnuplot(const std::string& script) {
  const char* argv[] = {"gnuplot", script.c_str(), nullptr};
  // The signals wick ignores (main.cpp) are gnuplot's to take as it would.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t restored;
  sigemptyset(&restored);
  sigaddset(&restored, SIGPIPE);
  sigaddset(&restored, SIGXFSZ);
  posix_spawnattr_setsigdefault(&attr, &restored);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid;
  int rc = posix_spawnp(&pid, "gnuplot", nullptr, &attr, const_cast<char**>(argv), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Draws `body` (gnuplot commands after the terminal and output) into the PNG `out`. gnuplot
// works in a private folder: the script and the PNG have names made here, so neither the
// output path nor the run folder's name is ever part of a command.
}  // namespace

void render(const std::string& body, const fs::path& out, int width, int height) {
  // In TMPDIR when set, as other programs' temporary files go (/tmp otherwise).
  std::error_code tmp_ec;
  fs::path base = fs::temp_directory_path(tmp_ec);
  if (tmp_ec) base = "/tmp";
  std::string tmpl = (base / "wick-plot-XXXXXX").string();
  if (!::mkdtemp(tmpl.data()))
    throw std::runtime_error("cannot create a temporary folder in " + base.string() + ": " +
                             std::strerror(errno) + " (set TMPDIR to a writable folder)");
  const fs::path work(tmpl);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{work};
  const fs::path script = work / "plot.gp", png = work / "plot.png";
  {
    std::ofstream f(script, std::ios::binary);
    f << "set terminal pngcairo size " << width << "," << height << " noenhanced font \"sans,10\"\n"
      << "set output " << quote(png.string()) << "\n"
      << body << "set output\n";
    if (!f.flush()) throw std::runtime_error("cannot write the gnuplot script to " + work.string());
  }
  const int rc = run_gnuplot(script.string());
  const int err = errno;
  if (rc == -1) {
    if (err == ENOENT)
      throw GnuplotMissing(
          "gnuplot not found in PATH; install it with `sudo apt-get install gnuplot-nox` "
          "(or run scripts/install-deps.sh)");
    throw std::runtime_error(std::string("cannot run gnuplot: ") + std::strerror(err));
  }
  std::error_code ec;
  if (rc != 0 || !fs::is_regular_file(png, ec))
    throw std::runtime_error("gnuplot failed (exit status " + std::to_string(rc) +
                             ", its messages are above); it needs the pngcairo terminal "
                             "(Debian's gnuplot-nox has it)");
  // Copied beside the destination, then renamed: a reader never sees half a PNG.
  const fs::path tmp_png = out.string() + ".tmp";
  fs::copy_file(png, tmp_png, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tmp_png, out, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp_png, ignore);
    throw std::runtime_error("cannot write '" + out.string() + "': " + ec.message());
  }
}

}  // namespace wick::cli
