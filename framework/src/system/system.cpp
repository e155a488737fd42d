#include "wick/system.hpp"

#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>

namespace wick {

namespace fs = std::filesystem;

std::string executable_dir() {
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

std::string default_plugin_dir() {
  // Beside libwick itself (LIB/wick/plugins), so that a host program built anywhere against an
  // installed wick finds the plugins installed with it; for the wick command (BIN/../lib) the
  // same folder. Told once, at the first call: a relative name resolves against the working
  // directory. Only a libwick file counts (its links resolved): compiled into a program, this
  // code would get the program's argv[0].
  static const std::string dir = [] {
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&default_plugin_dir), &self) && self.dli_fname) {
      std::error_code ec;
      const auto lib = fs::canonical(self.dli_fname, ec);
      if (!ec && lib.filename().string().rfind("libwick", 0) == 0)
        return (lib.parent_path() / "wick" / "plugins").string();
    }
    const auto exe = executable_dir();
    if (exe.empty()) return std::string();
    return (fs::path(exe).parent_path() / "lib" / "wick" / "plugins").lexically_normal().string();
  }();
  return dir;
}

std::string_view to_string(BlasKind k) {
  switch (k) {
    case BlasKind::none:
      return "none found";
    case BlasKind::reference:
      return "reference BLAS (slow)";
    case BlasKind::openblas:
      return "OpenBLAS";
    case BlasKind::other:
      return "optimised BLAS";
    case BlasKind::bundled:
      return "linked into LibTorch";
  }
  return "?";
}

std::string blas_path_in_maps_line(std::string_view line) {
  // "addr perms offset dev inode   /path/to/file": the path is the rest from the first '/'.
  auto pos = line.find('/');
  if (pos == std::string_view::npos) return {};
  std::string path(line.substr(pos));
  auto name = fs::path(path).filename().string();
  for (const char* prefix : {"libblas.so", "libopenblas", "libblis", "libmkl_rt"})
    if (name.rfind(prefix, 0) == 0) return path;
  return {};
}

BlasKind classify_blas_path(std::string_view path) {
  if (path.empty()) return BlasKind::none;
  if (fs::path(std::string(path)).filename().string().rfind("libtorch_cpu", 0) == 0)
    return BlasKind::bundled;
  if (path.find("openblas") != std::string_view::npos) return BlasKind::openblas;
  for (const char* fast : {"blis", "mkl", "atlas"})
    if (path.find(fast) != std::string_view::npos) return BlasKind::other;
  return BlasKind::reference;
}

std::string loaded_blas() {
  // The library LibTorch's sgemm_ calls binds to: the first in the global lookup scope that
  // defines it. More than one BLAS can be mapped (liblapack.so.3 may pull in OpenBLAS beside
  // a reference libblas.so.3 that comes first), so the symbol, not the mapping, decides.
  if (void* sym = dlsym(RTLD_DEFAULT, "sgemm_")) {
    Dl_info info{};
    if (dladdr(sym, &info) && info.dli_fname && info.dli_fname[0] == '/') {
      std::error_code ec;
      auto real = fs::canonical(info.dli_fname, ec);  // through the alternatives symlinks
      return ec ? std::string(info.dli_fname) : real.string();
    }
  }
  // No symbol to ask about: the first BLAS-looking mapping.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto path = blas_path_in_maps_line(line);
    if (!path.empty()) return path;
  }
  return {};
}

bool reference_blas_loaded() {
  return classify_blas_path(loaded_blas()) == BlasKind::reference;
}

void warn_if_reference_blas() {
  static bool warned = false;
  if (warned) return;
  const auto path = loaded_blas();
  if (classify_blas_path(path) != BlasKind::reference) return;
  warned = true;
  std::fprintf(stderr,
               "wick: warning: LibTorch is using the reference BLAS (%s), which trains about 15x "
               "slower; install libopenblas0-openmp (scripts/install-deps.sh does); `wick doctor` "
               "shows the set-up\n",
               path.c_str());
}

bool keep_freed_memory() {
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("MALLOC_MMAP_THRESHOLD_")) return false;
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc."))
    return false;
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
  return mmap_ok && trim_ok;
}

double process_age_seconds() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // After "(comm)" come the fields from the 3rd on; the 22nd is the start time in ticks.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return -1;
  std::ifstream up("/proc/uptime");
  double uptime = 0;
  if (!(up >> uptime)) return -1;
  return uptime - std::stod(field) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double peak_rss_mb() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

// Where the leak check needs the ordinary exit (GCC and clang say ASan each their own way).
#if defined(__SANITIZE_ADDRESS__)
#define WICK_EXIT_CHECKS_LEAKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WICK_EXIT_CHECKS_LEAKS 1
#endif
#endif

void exit_without_teardown(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::clog.flush();
  std::fflush(nullptr);
#ifdef WICK_EXIT_CHECKS_LEAKS
  std::exit(code);
#else
  ::_exit(code);
#endif
}

}  // namespace wick
