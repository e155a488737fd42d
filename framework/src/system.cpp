#include "wick/system.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace wick {

namespace fs = std::filesystem;

std::string executable_dir() {
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

std::string default_plugin_dir() {
  auto dir = executable_dir();
  if (dir.empty()) return {};
  return (fs::path(dir).parent_path() / "lib" / "wick" / "plugins").lexically_normal().string();
}

std::string loaded_blas() {
  // The dynamic loader maps the file the alternatives symlink points to, so /proc/self/maps
  // shows which implementation LibTorch really calls.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto pos = line.find('/');
    if (pos == std::string::npos) continue;
    std::string path = line.substr(pos);
    auto name = fs::path(path).filename().string();
    if (name.rfind("libblas.so", 0) == 0 || name.rfind("libopenblas", 0) == 0) return path;
  }
  return {};
}

bool reference_blas_loaded() {
  auto path = loaded_blas();
  return !path.empty() && path.find("openblas") == std::string::npos &&
         path.find("blis") == std::string::npos && path.find("mkl") == std::string::npos &&
         path.find("atlas") == std::string::npos;
}

void warn_if_reference_blas() {
  static bool warned = false;
  if (warned || !reference_blas_loaded()) return;
  warned = true;
  std::fprintf(stderr,
               "wick: warning: LibTorch is using the reference BLAS (%s), which trains about 15x "
               "slower; install libopenblas0-openmp (scripts/install-deps.sh does)\n",
               loaded_blas().c_str());
}

}  // namespace wick
