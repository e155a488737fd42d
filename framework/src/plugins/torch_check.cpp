#include "plugins/torch_check.hpp"

#include <link.h>

#include <map>
#include <set>
#include <sstream>

#include "plugins/elf_file.hpp"
#include "wick/build_record.hpp"
#include "wick/loader.hpp"

namespace wick {

std::string TorchBuild::describe() const {
  if (torch == "none") return "no LibTorch";
  return "LibTorch " + torch + " (" + (cuda ? "CUDA" : "CPU") + ", " +
         (cxx11_abi ? "C++11 ABI" : "pre-C++11 ABI") + ")";
}

std::optional<TorchBuild> parse_build_record(std::string_view text) {
  // The section may hold padding after the string.
  text = text.substr(0, text.find('\0'));
  std::istringstream in{std::string(text)};
  std::string magic, format;
  if (!(in >> magic >> format) || magic != "wick-build" || format != "1") return std::nullopt;
  std::map<std::string, std::string> kv;
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) return std::nullopt;
    kv[field.substr(0, eq)] = field.substr(eq + 1);
  }
  auto flag = [&](const char* key) -> std::optional<bool> {
    const auto it = kv.find(key);
    if (it == kv.end() || (it->second != "0" && it->second != "1")) return std::nullopt;
    return it->second == "1";
  };
  const auto cuda = flag("cuda"), abi = flag("cxx11abi");
  if (!kv.count("torch") || kv["torch"].empty() || !cuda || !abi) return std::nullopt;
  const auto debug_stl = kv.count("debugstl") ? flag("debugstl") : std::optional<bool>(false);
  if (!debug_stl) return std::nullopt;
  return TorchBuild{kv["torch"], *cuda, *abi, *debug_stl};
}

const TorchBuild& host_torch_build() {
  static const TorchBuild host = *parse_build_record(WICK_BUILD_RECORD);
  return host;
}

namespace {

bool is_torch_library(const std::string& soname) {
  for (const char* prefix : {"libc10", "libtorch"})
    if (soname.rfind(prefix, 0) == 0) return true;
  return false;
}

// The sonames of the LibTorch libraries loaded in this process (wick's own LibTorch).
const std::set<std::string>& host_torch_sonames() {
  static const std::set<std::string> names = [] {
    std::set<std::string> out;
    ::dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
          const std::string path = info->dlpi_name ? info->dlpi_name : "";
          const std::string file = path.substr(path.rfind('/') + 1);
          if (is_torch_library(file)) {
            const auto facts = read_elf_facts(path, "");
            static_cast<std::set<std::string>*>(data)->insert(
                facts && !facts->soname.empty() ? facts->soname : file);
          }
          return 0;
        },
        &out);
    return out;
  }();
  return names;
}

const char* kRebuild =
    "Rebuild the plugin against this wick (find_package(wick) with "
    "-DCMAKE_PREFIX_PATH=<wick's install or build folder> brings wick's LibTorch; "
    "`wick doctor` shows which one), or run it with a wick built against its LibTorch";

}  // namespace

std::string check_torch_build(const std::string& path, const std::optional<ElfFacts>& facts) {
  if (!facts) return "";  // not an ELF file: dlopen says what it is
  const auto& host = host_torch_build();
  if (facts->section) {
    const auto rec = parse_build_record(*facts->section);
    if (!rec)
      throw PluginError(PluginError::Kind::malformed,
                        "'" + path + "': malformed LibTorch build record '" +
                            facts->section->substr(0, 80) +
                            "' (a bug in the plugin, or not built with <wick/plugin.hpp>)");
    if (rec->debug_stl != host.debug_stl)
      throw PluginError(PluginError::Kind::torch_mismatch,
                        "'" + path + "' was compiled " + (rec->debug_stl ? "with" : "without") +
                            " -D_GLIBCXX_DEBUG and this wick " +
                            (host.debug_stl ? "with" : "without") +
                            " it: libstdc++'s checked containers are laid out otherwise than its "
                            "plain ones, and the std::string and std::vector wick's API passes "
                            "would crash the plugin. Rebuild it " +
                            (host.debug_stl ? "with" : "without") +
                            " _GLIBCXX_DEBUG (-D_GLIBCXX_ASSERTIONS checks without changing "
                            "the layout)");
    if (rec->torch != "none" && host.torch != "none" && !rec->same_as(host))
      throw PluginError(PluginError::Kind::torch_mismatch,
                        "'" + path + "' was built against " + rec->describe() +
                            ", but this wick runs on " + host.describe() +
                            "; loading it would put a second LibTorch in this process. " +
                            kRebuild);
    return rec->describe();
  }
  // Built before SDK 2.5: what it links tells whether its LibTorch is this one.
  for (const auto& soname : facts->needed)
    if (is_torch_library(soname) && !host_torch_sonames().count(soname))
      throw PluginError(PluginError::Kind::torch_mismatch,
                        "'" + path + "' has no LibTorch build record (built with wick's SDK " +
                            "before 2.5) and links " + soname +
                            ", which is not a library of the LibTorch this wick runs on (" +
                            host.describe() + "). " + kRebuild);
  return "";
}

}  // namespace wick
