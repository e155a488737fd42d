// `wick new-plugin NAME [--kind hook|task|metric] [--dir DIR]`: writes a plugin project that
// builds against the installed wick package as it is: CMakeLists.txt, NAME.cpp (the SDK
// guide's minimal hook, task or metric, renamed), NAME.toml (a run that uses it) and a README.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "commands.hpp"
#include "wick/build_info.hpp"
#include "wick/loader.hpp"
#include "wick/plugin_template.hpp"
#include "wick/system.hpp"

namespace fs = std::filesystem;

namespace wick::cli {

namespace {

// What went wrong with the request itself; reported as a usage error.
struct NewPluginError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check_name(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 &&
            (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok)
    throw NewPluginError("invalid plugin name '" + name +
                         "': use letters, digits and '_', starting with a letter or '_' "
                         "(at most 64 characters), e.g. my_hook");
  // The name is also the CMake target; these are taken by CMake's own targets.
  static const std::set<std::string> reserved{
      "all",     "clean",  "help",           "install",    "test",
      "package", "depend", "package_source", "edit_cache", "rebuild_cache"};
  if (reserved.count(name))
    throw NewPluginError("invalid plugin name '" + name +
                         "': CMake reserves it for a target of "
                         "its own; pick another, e.g. " +
                         name + "_hook");
}

// my_hook -> MyHook, for the class name.
std::string camel_case(const std::string& name) {
  std::string out;
  bool up = true;
  for (char c : name) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "Plugin" + out;
  return out;
}

// A path as a shell command line takes it: as it is when it holds only safe characters, else
// in single quotes (a prefix with a space would split in two when pasted).
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of(
                                       "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "abcdefghijklmnopqrstuvwxyz0123456789"
                                       "_./-+=:@%,") == std::string::npos;
  if (plain) return s;
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f.flush()) throw std::runtime_error("cannot write " + p.string());
}

// "0.1.0" -> "0.1": any later minor of the same major satisfies find_package.
std::string major_minor(const std::string& v) {
  return v.substr(0, v.find('.', v.find('.') + 1));
}

std::string cmake_text(const std::string& name) {
  return "# Builds the wick plugin " + name + " into build/wick_" + name +
         ".so (see README.md).\n"
         "cmake_minimum_required(VERSION 3.18)\n"
         "project(" +
         name +
         " LANGUAGES CXX)\n"
         "if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)\n"
         "  set(CMAKE_BUILD_TYPE Release)\n"
         "endif()\n\n"
         "# Gives wick::wick and wick_add_plugin(); -DCMAKE_PREFIX_PATH=<wick prefix> when wick\n"
         "# is not installed under /usr or /usr/local.\n"
         "find_package(wick " +
         major_minor(WICK_VERSION) +
         " CONFIG REQUIRED)\n"
         "wick_add_plugin(" +
         name + " SOURCES " + name + ".cpp)\n";
}

// A kind new-plugin can write. The sources are the SDK's examples, built by the tests.
struct Kind {
  const char* source;      // the template's text
  const char* from_snake;  // the template's plugin name, replaced by NAME
  const char* from_camel;  // its class name
};

Kind kind_of(const std::string& kind) {
  if (kind == "hook") return {kPluginTemplate, "minimal_hook", "MinimalHook"};
  if (kind == "task") return {kTaskTemplate, "minimal_task", "MinimalTask"};
  if (kind == "metric") return {kMetricTemplate, "minimal_metric", "MinimalMetric"};
  throw NewPluginError("unknown plugin kind '" + kind + "': use hook, task or metric");
}

std::string task_toml_text(const std::string& name) {
  return "# Trains the task " + name + ": `wick fit " + name +
         ".toml` after building into ./build.\n"
         "# [plugins] path is relative to this file; output_dir to the current directory.\n"
         "[trainer]\n"
         "epochs = 10\n"
         "batch_size = 32\n"
         "output_dir = \"runs/" +
         name +
         "\"\n\n"
         "[task]\n"
         "plugin = \"" +
         name +
         "\"\n"
         "samples = 512\n\n"
         "[plugins]\n"
         "path = [\"build\"]\n\n"
         "[[hooks]]\n"
         "plugin = \"progress\"\n";
}

std::string toml_text(const std::string& name, bool metric) {
  return "# Trains wick's synthetic task with " + name + " enabled: `wick fit " + name +
         ".toml`\n"
         "# after building into ./build. [plugins] path is relative to this file;\n"
         "# output_dir to the current directory.\n"
         "[trainer]\n"
         "epochs = 5\n"
         "batch_size = 32\n"
         "output_dir = \"runs/" +
         name +
         "\"\n\n"
         "[task]\n"
         "plugin = \"synthetic\"\n"
         "samples = 1024\n\n"
         "[plugins]\n"
         "path = [\"build\"]\n\n" +
         (metric ? "[[metrics]]\nplugin = \"" + name + "\"\nmin_samples = 1\n"
                 : "[[hooks]]\nplugin = \"" + name + "\"\ntarget = 0.5\n");
}

// The project's README: what the plugin is, how to build and run it, and what to change.
struct Readme {
  std::string intro;     // what the plugin does, and which new-plugin command made it
  std::string commands;  // wick commands after the build, one per line
  std::string next;      // a paragraph on what to do next
  std::string cpp;       // what NAME.cpp holds
  std::string toml;      // what NAME.toml runs
};

std::string readme_text(const std::string& name, const std::string& prefix, const Readme& r) {
  return "# " + name + "\n\n" + r.intro +
         " The plugin guide is `sdk/README.md` in the wick sources.\n\n"
         "## Build and run\n\n```sh\ncmake -S . -B build -DCMAKE_PREFIX_PATH=" +
         shell_word(prefix) + "\ncmake --build build              # -> build/wick_" + name +
         ".so\n" + r.commands + "```\n\n" + r.next + "\n\n## Files\n\n- `" + name +
         ".cpp`: " + r.cpp + ".\n- `CMakeLists.txt`: `find_package(wick)` and `wick_add_plugin(" +
         name + " ...)`.\n- `" + name + ".toml`: " + r.toml + ".\n";
}

Readme readme_of(const std::string& kind, const std::string& name, const std::string& prefix) {
  const std::string wick = shell_word(prefix + "/bin/wick"),
                    fit = wick + " fit " + name + ".toml\n";
  if (kind == "metric")
    return {
        "A wick metric plugin: balanced accuracy (the mean of the classes' recalls) over the "
        "whole validation set, logged as `valid/" +
            name + "`. Made by `wick new-plugin --kind metric`.",
        fit,
        "`update` adds a batch to counts that wick sums over data-parallel ranks; `compute` "
        "turns the whole split's counts into the value.",
        "the metric (update, compute, state, one declared parameter)",
        "a run of wick's synthetic task with it"};
  if (kind == "task")
    return {
        "A wick task plugin: a linear model fitted to y = 3x - 1 on data made in memory. "
        "Made by `wick new-plugin --kind task`.",
        fit,
        "Replace the model, the data (`wick::TensorDataset`, or your own `wick::Dataset`), "
        "`forward` and `loss`; the trainer does the rest.",
        "the task (model, data, forward, loss, one declared parameter)", "a run of the task"};
  return {
      "A wick hook plugin: it stops the fit once the validation accuracy reaches `target`. "
      "Made by `wick new-plugin`.",
      wick + " describe " + name + ".toml   # shows " + name + " at after_epoch\n" + fit,
      "`" + name +
          ".toml` finds the plugin through `[plugins] path = [\"build\"]`; elsewhere,\n"
          "add the build folder to `[plugins] path` or `WICK_PLUGIN_PATH`, or pass\n"
          "`--plugin-path build`. `wick plugins --plugin-path build` lists it with its "
          "parameters.\nTry `--set hooks." +
          name + ".target=2` to see a parameter check fail.",
      "the hook (one point, one declared parameter)",
      "a run of the synthetic task with the hook enabled"};
}

int cmd_new_plugin(const std::string& name, const std::string& kind_name,
                   const std::string& dir_opt) {
  try {
    const Kind kind = kind_of(kind_name);
    const bool task = kind_name == "task", metric = kind_name == "metric";
    check_name(name);
    const fs::path dir = fs::absolute(dir_opt.empty() ? name : dir_opt).lexically_normal();
    std::error_code ec;
    if (fs::exists(fs::symlink_status(dir, ec)))
      throw NewPluginError("refusing to overwrite '" + dir.string() +
                           "': it exists; remove it or pass --dir with a new folder");
    // The generated TOML searches build/ and then the installed plugins: one name, one file
    // (a wick_NAME.so, or a plugin of that name in a multi-plugin library).
    try {
      auto found = PluginFinder(plugin_search_path({})).find(name);
      throw NewPluginError("a plugin named '" + name + "' already exists (" + found->info().path +
                           "); two plugins may not share a name, pick another");
    } catch (const PluginError& e) {
      if (e.kind != PluginError::Kind::not_found)
        throw NewPluginError("a plugin named '" + name + "' already exists (" + e.what() +
                             "); two plugins may not share a name, pick another");
    }

    fs::create_directories(dir);
    std::string src = replace_all(kind.source, kind.from_snake, name);
    src = replace_all(src, kind.from_camel, camel_case(name));
    const auto prefix = fs::path(executable_dir()).parent_path().lexically_normal().string();
    write(dir / "CMakeLists.txt", cmake_text(name));
    write(dir / (name + ".cpp"), src);
    write(dir / (name + ".toml"), task ? task_toml_text(name) : toml_text(name, metric));
    write(dir / "README.md", readme_text(name, prefix, readme_of(kind_name, name, prefix)));

    std::printf(
        "wick: wrote plugin project %s\n\n  cd %s\n"
        "  cmake -S . -B build -DCMAKE_PREFIX_PATH=%s\n  cmake --build build\n"
        "  %s fit %s.toml\n",
        dir.c_str(), shell_word(dir.string()).c_str(), shell_word(prefix).c_str(),
        shell_word(prefix + "/bin/wick").c_str(), name.c_str());
    return kOk;
  } catch (const NewPluginError& e) {
    std::fprintf(stderr, "wick: new-plugin: %s\n", e.what());
    return kUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wick: new-plugin: %s\n", e.what());
    return kFailed;
  }
}

}  // namespace

void add_new_plugin_command(CLI::App& app, Registry& r) {
  static std::string name, dir, kind = "hook";
  auto* cmd =
      app.add_subcommand("new-plugin",
                         "write a plugin project (CMake, one hook, task or metric, a TOML to try "
                         "it) to build against the installed wick");
  cmd->add_option("NAME", name, "plugin name: letters, digits and '_'")->required();
  cmd->add_option("--kind", kind, "hook (default), task or metric")->type_name("KIND");
  cmd->add_option("--dir", dir, "folder to create (default ./NAME); must not exist")
      ->type_name("DIR");
  r.push_back({cmd, [] { return cmd_new_plugin(name, kind, dir); }});
}

}  // namespace wick::cli
