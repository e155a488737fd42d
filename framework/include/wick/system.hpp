// Facts about the process and machine: where wick is installed, which BLAS is loaded.
#pragma once

#include <string>

namespace wick {

// Folder of the running executable (resolved through /proc/self/exe).
std::string executable_dir();
// The folder where built-in plugins live, relative to the executable: <exe>/../lib/wick/plugins.
std::string default_plugin_dir();
// The BLAS library LibTorch's libblas.so.3 resolves to, e.g. ".../openblas-openmp/libblas.so.3"
// ("" when none is mapped yet), and whether it is Debian's slow reference implementation.
std::string loaded_blas();
bool reference_blas_loaded();
// Prints a warning to stderr once when the reference BLAS is in use.
void warn_if_reference_blas();

}  // namespace wick
