// Which LibTorch a plugin (and wick itself) was compiled against, kept as text in a section of
// its own in the library file ("wick_build"), where wick reads it before loading the library:
// a plugin built against another LibTorch would crash once its LibTorch is loaded beside
// wick's, so the check must come first. WICK_PLUGIN and WICK_PLUGINS emit the record (SDK 2.5).
//
//   wick-build 1 sdk=2.24 torch=2.11.0 cuda=1 cxx11abi=1 debugstl=0
//
// torch=none: compiled without LibTorch's headers on the include path (wick::wick has them);
// cuda=1: LibTorch's CUDA build; cxx11abi: libstdc++'s std::string and std::list ABI;
// debugstl=1: compiled with _GLIBCXX_DEBUG (since 2.24; an older record has no such field).
#pragma once

#include <cstddef>  // defines _GLIBCXX_USE_CXX11_ABI

#include "wick/version.hpp"

#define WICK_STRINGIFY_(x) #x
#define WICK_STRINGIFY(x) WICK_STRINGIFY_(x)

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#define WICK_BUILD_TORCH              \
  WICK_STRINGIFY(TORCH_VERSION_MAJOR) \
  "." WICK_STRINGIFY(TORCH_VERSION_MINOR) "." WICK_STRINGIFY(TORCH_VERSION_PATCH)
#else
#define WICK_BUILD_TORCH "none"
#endif

// ATen/cuda/CUDAConfig.h is generated only when LibTorch is built with CUDA.
#if __has_include(<ATen/cuda/CUDAConfig.h>)
#define WICK_BUILD_CUDA "1"
#else
#define WICK_BUILD_CUDA "0"
#endif

#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI == 0
#define WICK_BUILD_CXX11_ABI "0"
#else
#define WICK_BUILD_CXX11_ABI "1"
#endif

// Since SDK 2.24: libstdc++'s debug mode changes the containers' layout (std::vector,
// std::map, ...), which a plugin and wick must agree on.
#if defined(_GLIBCXX_DEBUG)
#define WICK_BUILD_DEBUG_STL "1"
#else
#define WICK_BUILD_DEBUG_STL "0"
#endif

#define WICK_BUILD_RECORD                                                 \
  "wick-build 1 sdk=" WICK_STRINGIFY(WICK_API_MAJOR) "." WICK_STRINGIFY(  \
      WICK_API_MINOR) " torch=" WICK_BUILD_TORCH " cuda=" WICK_BUILD_CUDA \
                      " cxx11abi=" WICK_BUILD_CXX11_ABI " debugstl=" WICK_BUILD_DEBUG_STL

// The section's name; with no leading dot it is a valid C name (the linker's __start_ symbols).
#define WICK_BUILD_SECTION "wick_build"

// One record per library: `used` keeps it although nothing refers to it.
#define WICK_EMIT_BUILD_RECORD                                                         \
  namespace {                                                                          \
  __attribute__((section(WICK_BUILD_SECTION), used)) const char wick_build_record_[] = \
      WICK_BUILD_RECORD;                                                               \
  }
