// Finding plugins by name: the search path (the config's [plugins] path, WICK_PLUGIN_PATH,
// the default folder) and the scan of its folders (wick_NAME.so, and the plugins of each
// wicklib_*.so library), first match wins.
#include <cstdlib>
#include <filesystem>
#include <set>

#include "plugins/plugin_name.hpp"
#include "wick/config.hpp"  // did_you_mean
#include "wick/loader.hpp"
#include "wick/system.hpp"

namespace wick {

namespace fs = std::filesystem;

std::vector<std::string> plugin_search_path(const std::vector<std::string>& from_config) {
  std::vector<std::string> dirs = from_config;
  if (const char* env = std::getenv("WICK_PLUGIN_PATH")) {
    std::string s = env;
    std::size_t start = 0;
    while (start <= s.size()) {
      auto end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      std::string entry = s.substr(start, end - start);
      // Empty or relative entries would mean the current directory: never by default. A
      // relative one is said once (an empty one is a stray ':').
      if (!entry.empty() && fs::path(entry).is_absolute()) {
        dirs.push_back(entry);
      } else if (!entry.empty()) {
        static std::set<std::string> said;
        if (said.insert(entry).second)
          std::fprintf(stderr,
                       "wick: warning: WICK_PLUGIN_PATH entry '%s' is ignored: entries are "
                       "absolute folders (a relative one would depend on the current "
                       "directory); give %s\n",
                       entry.c_str(), fs::absolute(entry).lexically_normal().c_str());
      }
      start = end + 1;
    }
  }
  auto def = default_plugin_dir();
  if (!def.empty()) dirs.push_back(def);
  // Drop repeats of one folder, keeping the first.
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (auto& d : dirs) {
    std::error_code ec;
    auto c = fs::weakly_canonical(d, ec).string();
    if (seen.insert(c).second) out.push_back(c);
  }
  return out;
}

PluginFinder::PluginFinder(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}

namespace {

// The multi-plugin libraries (wicklib_*.so) of one folder, in name order.
std::vector<fs::path> plugin_lists_in(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& ent : fs::directory_iterator(dir, ec)) {
    const auto f = ent.path().filename().string();
    if (f.rfind(kPluginLibraryPrefix, 0) == 0 && ent.path().extension() == ".so")
      out.push_back(ent.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::shared_ptr<const PluginLibrary> PluginFinder::find(const std::string& name) const {
  // A name is a file name's part: nothing that could point elsewhere ("a/../b").
  if (!is_plugin_word(name))
    throw PluginError(PluginError::Kind::not_found,
                      "'" + name + "' is not a plugin's name (" + kPluginWordRule + ")");
  std::vector<std::string> hits;
  const std::string file = "wick_" + name + ".so";
  for (const auto& d : dirs_) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    auto f = fs::path(d) / file;
    if (fs::exists(f, ec)) {
      check_not_world_writable(d, "folder");
      hits.push_back(f.string());
    }
  }
  // Then the plugins declared by multi-plugin libraries: loaded (once per process) to read
  // their lists, so that one name is never served by two files unnoticed.
  std::shared_ptr<const PluginLibrary> listed;
  std::vector<std::string> skipped;
  bool any_lists = false;
  for (const auto& d : dirs_) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    for (const auto& f : plugin_lists_in(d)) {
      any_lists = true;
      try {
        for (const auto& lib : load_plugin_libraries(f.string()))
          if (lib->info().name == name) {
            hits.push_back(lib->info().path);
            if (!listed) listed = lib;
          }
      } catch (const PluginError& e) {
        skipped.push_back(e.what());
      }
    }
  }
  if (hits.empty()) {
    std::string searched;
    for (const auto& d : dirs_) searched += "\n  " + d;
    if (searched.empty()) searched = "\n  (no folders)";
    std::string also;
    if (any_lists)
      also = std::string(" and in the plugin libraries ") + kPluginLibraryPrefix + "*.so";
    for (const auto& s : skipped) also += "\nskipped: " + s;
    // A near miss among the single-plugin files found (a typo: grad_clp for grad_clip).
    std::vector<std::string> present;
    for (const auto& d : dirs_) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(d, ec)) {
        const auto f = e.path().filename().string();
        if (f.size() > 8 && f.rfind("wick_", 0) == 0 && f.compare(f.size() - 3, 3, ".so") == 0)
          present.push_back(f.substr(5, f.size() - 8));
      }
    }
    const auto near = did_you_mean(name, present);
    throw PluginError(PluginError::Kind::not_found,
                      "no plugin named '" + name + "'" +
                          (near.empty() ? "" : "; did you mean '" + near + "'?") + " (looked for " +
                          file + " in:" + searched + ")" + also +
                          "\nrun `wick plugins` to list what is installed, or add its folder "
                          "to [plugins] path or WICK_PLUGIN_PATH");
  }
  if (hits.size() > 1)
    throw PluginError(PluginError::Kind::duplicate,
                      "two plugins named '" + name + "': " + hits[0] + " and " + hits[1] +
                          "; remove one, or take its folder out of the plugin path");
  if (listed) return listed;
  auto lib = load_plugin_library(hits[0]);
  if (lib->info().name != name)
    throw PluginError(PluginError::Kind::name_mismatch,
                      "'" + hits[0] + "' declares plugin '" + lib->info().name + "', not '" + name +
                          "'; name the file wick_" + lib->info().name + ".so");
  return lib;
}

PluginFinder::Scan PluginFinder::scan() const {
  Scan out;
  std::map<std::string, std::string> name_to_path;
  for (const auto& d : dirs_) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) continue;
    try {
      check_not_world_writable(d, "folder");
    } catch (const PluginError& e) {
      out.problems.push_back(e.what());
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& ent : fs::directory_iterator(d, ec))
      if (ent.path().extension() == ".so") files.push_back(ent.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      try {
        for (const auto& lib : load_plugin_libraries(f.string())) {
          const auto& n = lib->info().name;
          if (auto it = name_to_path.find(n); it != name_to_path.end()) {
            out.problems.push_back("two plugins named '" + n + "': " + it->second + " and " +
                                   lib->info().path + "; remove one");
            continue;
          }
          name_to_path[n] = lib->info().path;
          out.plugins.push_back(lib);
        }
      } catch (const PluginError& e) {
        out.problems.push_back(e.what());
      }
    }
  }
  return out;
}

}  // namespace wick
