#include "plugins/elf_file.hpp"

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <fstream>

namespace wick {

namespace {

// Reads ranges of a file that is not trusted: a range past its end is refused, not read.
class Reader {
 public:
  explicit Reader(const std::string& path) : in_(path, std::ios::binary) {
    if (in_) {
      in_.seekg(0, std::ios::end);
      size_ = static_cast<std::uint64_t>(in_.tellg());
    }
  }
  bool ok() const { return static_cast<bool>(in_); }
  std::uint64_t size() const { return size_; }

  std::optional<std::string> bytes(std::uint64_t off, std::uint64_t n) {
    // String tables and the dynamic section are small; anything near this is a corrupt header.
    constexpr std::uint64_t kMax = 64u << 20;
    if (off > size_ || size_ - off < n || n > kMax) return std::nullopt;
    std::string out(n, '\0');
    in_.seekg(static_cast<std::streamoff>(off));
    if (!in_.read(out.data(), static_cast<std::streamsize>(n))) return std::nullopt;
    return out;
  }
  template <class T>
  bool read(std::uint64_t off, T& out) {
    auto b = bytes(off, sizeof(T));
    if (!b) return false;
    std::memcpy(&out, b->data(), sizeof(T));
    return true;
  }

 private:
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

// The NUL-terminated string at `off` of a string table ("" when out of range).
std::string string_at(const std::string& table, std::uint64_t off) {
  if (off >= table.size()) return {};
  const char* p = table.data() + off;
  return std::string(p, strnlen(p, table.size() - off));
}

}  // namespace

std::optional<ElfFacts> read_elf_facts(const std::string& path, const std::string& section_name) {
  Reader f(path);
  Elf64_Ehdr eh{};
  if (!f.ok() || !f.read(0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_shentsize != sizeof(Elf64_Shdr))
    return std::nullopt;
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (std::size_t i = 0; i < sections.size(); ++i)
    if (!f.read(eh.e_shoff + i * sizeof(Elf64_Shdr), sections[i])) return std::nullopt;
  auto contents = [&](const Elf64_Shdr& s) -> std::optional<std::string> {
    if (s.sh_type == SHT_NOBITS) return std::nullopt;
    return f.bytes(s.sh_offset, s.sh_size);
  };

  ElfFacts facts;
  for (const auto& s : sections)
    if ((s.sh_flags & SHF_EXECINSTR) && (s.sh_flags & SHF_ALLOC) && s.sh_size > 0)
      facts.code.emplace_back(s.sh_addr, s.sh_addr + s.sh_size);
  if (eh.e_shstrndx < sections.size())
    if (auto names = contents(sections[eh.e_shstrndx]))
      for (const auto& s : sections)
        if (string_at(*names, s.sh_name) == section_name) {
          facts.section = contents(s);
          break;
        }
  for (const auto& s : sections) {
    if (s.sh_type != SHT_DYNAMIC || s.sh_link >= sections.size()) continue;
    auto dyn = contents(s);
    auto strtab = contents(sections[s.sh_link]);
    if (!dyn || !strtab) break;
    for (std::size_t off = 0; off + sizeof(Elf64_Dyn) <= dyn->size(); off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d{};
      std::memcpy(&d, dyn->data() + off, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED) facts.needed.push_back(string_at(*strtab, d.d_un.d_val));
      if (d.d_tag == DT_SONAME) facts.soname = string_at(*strtab, d.d_un.d_val);
    }
    break;
  }
  return facts;
}

std::string elf_cut_short(const std::string& path) {
  Reader f(path);
  Elf64_Ehdr eh{};
  if (!f.ok() || !f.read(0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_phentsize != sizeof(Elf64_Phdr))
    return "";
  auto cut = [&](std::uint64_t end) {
    return "it is cut short: its headers reach byte " + std::to_string(end) + " but the file has " +
           std::to_string(f.size()) + " bytes (an interrupted copy? copy it again)";
  };
  for (std::uint64_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    const std::uint64_t at = eh.e_phoff + i * sizeof(Elf64_Phdr);
    if (!f.read(at, ph)) return cut(at + sizeof(Elf64_Phdr));
    if (ph.p_type == PT_LOAD && (ph.p_offset > f.size() || f.size() - ph.p_offset < ph.p_filesz))
      return cut(ph.p_offset + ph.p_filesz);
  }
  const std::uint64_t sections_end = eh.e_shoff + std::uint64_t{eh.e_shnum} * eh.e_shentsize;
  if (eh.e_shnum > 0 && sections_end > f.size()) return cut(sections_end);
  return "";
}

}  // namespace wick
