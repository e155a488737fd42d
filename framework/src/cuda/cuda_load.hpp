// Private: whether wick has a CUDA side, and loading it (cuda_support.hpp). Torch-free, for
// the config, which loads it as soon as it reads that a run asks for CUDA.
#pragma once

#include <string>

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

// Exported for the white-box tests (tests/), which link libwick; not an installed header.
WICK_PUBLIC_BEGIN

namespace wick::cuda {

// Whether this wick was built with CUDA (a CUDA LibTorch and nvcc).
bool compiled();

// Loads the CUDA side (the module, and LibTorch's CUDA libraries with it) once; "" when it is
// loaded, else why not (built without CUDA, or the loader's message). LibTorch decides whether
// it has CUDA the first time it is asked and keeps that answer, so a process that may use CUDA
// calls this before anything asks LibTorch about CUDA (resolve_device and Config do).
std::string load();

// The module at `path` as the CUDA side, checked: it loads, has the table's symbol, and its
// table is this build's (its size); "" when it is loaded (or one already was), else why not.
// load() calls it for the module beside libwick; a test, for a module of another build.
std::string load_module(const std::string& path);

// Whether the CUDA side is loaded.
bool loaded();

}  // namespace wick::cuda

WICK_PUBLIC_END
