// Private: what wick reads of a plugin library's file before loading it, from its ELF headers:
// the content of a named section and the libraries it needs (DT_NEEDED). The file is not
// trusted: every offset and size is checked against the file's length. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wick {

struct ElfFacts {
  std::optional<std::string> section;  // the named section's bytes, if the file has it
  std::vector<std::string> needed;     // DT_NEEDED sonames, in order
  std::string soname;                  // DT_SONAME ("" when it has none)
  // The code sections' address ranges [start, end), relative to the load base: an entry point
  // must lie in one (a linker may map .rodata executable beside .text).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> code;
};

// nullopt when `path` is not a readable 64-bit little-endian ELF file (what wick loads here);
// the loader then goes on and lets dlopen say what is wrong.
std::optional<ElfFacts> read_elf_facts(const std::string& path, const std::string& section_name);

// Why `path` is unsafe to hand to dlopen ("" when nothing is found, or it is no 64-bit ELF
// file): a loadable segment, or the headers, reaching past the file's end, as in an
// interrupted copy. Mapping it, dlopen would fault (SIGBUS) instead of failing.
std::string elf_cut_short(const std::string& path);

}  // namespace wick
