// Private: a plugin library built against another LibTorch than this wick's is refused before
// it is loaded (loading it would map a second LibTorch beside wick's: a crash at best). What it
// was built against comes from its build record (wick/build_record.hpp) or, for a library
// older than SDK 2.5 without one, from the LibTorch libraries it links. Torch-free.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "plugins/elf_file.hpp"

namespace wick {

struct TorchBuild {
  std::string torch;  // "2.11.0", or "none" (built without LibTorch's headers)
  bool cuda = false;
  bool cxx11_abi = true;
  // Compiled with _GLIBCXX_DEBUG: libstdc++'s checked containers, laid out otherwise than the
  // ones wick's API passes (since SDK 2.24; older records lack it: false).
  bool debug_stl = false;
  // "LibTorch 2.11.0 (CUDA, C++11 ABI)", or "no LibTorch".
  std::string describe() const;
  bool same_as(const TorchBuild& o) const {
    return torch == o.torch && cuda == o.cuda && cxx11_abi == o.cxx11_abi;
  }
};

// A record's fields; nullopt when the text is not a record of a known format.
std::optional<TorchBuild> parse_build_record(std::string_view text);
// The LibTorch this wick was compiled against.
const TorchBuild& host_torch_build();

// What the library at `path` was built against ("" when it cannot tell: no record, SDK < 2.5),
// after refusing it (PluginError, kind torch_mismatch, naming both LibTorch builds and the fix)
// when that is not this wick's LibTorch. `facts`: read_elf_facts(path, WICK_BUILD_SECTION).
std::string check_torch_build(const std::string& path, const std::optional<ElfFacts>& facts);

}  // namespace wick
