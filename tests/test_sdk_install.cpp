// The SDK as an installed package: `cmake --install` into a temporary prefix, then plugin
// projects built out of tree against it (samples/external_plugin, one made by `wick
// new-plugin`, samples/gpt with its host program), listed, described and trained with by the
// installed `wick`.
// Slow (small builds with LibTorch flags); see tests/sdk.cmake.
#include <algorithm>
#include <regex>
#include <sstream>

#include "support.hpp"

using namespace wick::test;

namespace {

// A fixed scratch folder in the build tree rather than a random one, so that ccache can
// reuse the out-of-tree compiles of earlier runs (the paths are part of its key).
const fs::path kScratch = fs::path(WICK_BINARY_DIR) / "tests" / "sdk_install";

void require_ok(const RunResult& r, const std::string& what) {
  INFO(what << "\n--- stdout\n" << r.out << "\n--- stderr\n" << r.err);
  REQUIRE(r.exit_code == 0);
}

// configure + build a plugin project against the prefix, as its README says (plus `options`);
// configure only unless `compile`.
void build_project(const fs::path& src, const fs::path& build, const fs::path& prefix,
                   const std::vector<std::string>& options = {}, bool compile = true) {
  std::vector<std::string> configure = {WICK_CMAKE,     "-S", src.string(), "-B",
                                        build.string(), "-G", "Ninja"};
  configure.insert(configure.end(), options.begin(), options.end());
  // The installed wick first, then wherever wick's own dependencies were found.
  std::string outer = WICK_OUTER_PREFIX_PATH;
  std::replace(outer.begin(), outer.end(), ':', ';');
  configure.push_back("-DCMAKE_PREFIX_PATH=" + prefix.string() +
                      (outer.empty() ? "" : ";" + outer));
  if (std::string(WICK_OUTER_CXX_FLAGS) != "")
    configure.push_back("-DCMAKE_CXX_FLAGS=" + std::string(WICK_OUTER_CXX_FLAGS));
  configure.push_back("-DCMAKE_EXPORT_COMPILE_COMMANDS=ON");
  if (std::string(WICK_CCACHE_PROGRAM) != "")
    configure.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=" + std::string(WICK_CCACHE_PROGRAM));
  require_ok(run(configure), "configure " + src.string());
  if (compile)
    require_ok(run({WICK_CMAKE, "--build", build.string(), "-j2"}), "build " + src.string());
}

std::string runpath(const fs::path& elf) {
  auto r = run({WICK_READELF, "-d", elf.string()});
  std::smatch m;
  std::regex re(R"(\((?:RUNPATH|RPATH)\)\s+Library r\w*path: \[([^\]]*)\])");
  return std::regex_search(r.out, m, re) ? m[1].str() : std::string();
}

}  // namespace

TEST_CASE("installed wick: plugins built out of tree against it are found, described, run") {
  fs::remove_all(kScratch);
  const auto prefix = kScratch / "prefix";
  require_ok(run({WICK_CMAKE, "--install", WICK_BINARY_DIR, "--prefix", prefix.string()}),
             "cmake --install");
  const std::string wick = (prefix / "bin" / "wick").string();

  {  // the layout
    for (const char* f :
         {"bin/wick", "lib/libwick.so", "lib/wick/plugins/wick_synthetic.so",
          // the sample task and configs the README's commands use
          "lib/wick/plugins/wick_fashion_mnist.so", "share/wick/samples/fashion_mnist/mlp.toml",
          "share/wick/samples/fashion_mnist/cnn.toml", "include/wick/jit.hpp",
          "include/wick/tensor_module.hpp", "include/wick/wick.hpp", "include/wick/task.hpp",
          // the framework's headers, for host programs (wick::host), apart from the SDK's
          "include/wick-host/wick/trainer.hpp", "include/wick-host/wick/config.hpp",
          "lib/cmake/wick/wickConfig.cmake", "lib/cmake/wick/wickConfigVersion.cmake",
          "lib/cmake/wick/wickTargets.cmake", "lib/cmake/wick/WickPlugin.cmake"}) {
      INFO(f);
      CHECK(fs::exists(prefix / f));
    }
    CHECK_FALSE(fs::exists(prefix / "include/wick-host/wick/system.hpp"));  // libwick's own
    // A plugin's include path (include/) holds the SDK alone.
    CHECK_FALSE(fs::exists(prefix / "include/wick/trainer.hpp"));
    // Every wick header an installed header includes is installed too: an SDK header includes
    // SDK headers only, a framework header those of either.
    const std::regex inc(R"re(#include\s+[<"](wick/[^>"]+)[>"])re");
    for (const auto* folder : {"include", "include/wick-host"})
      for (const auto& e : fs::directory_iterator(prefix / folder / "wick")) {
        const auto text = read_file(e.path());
        for (std::sregex_iterator it(text.begin(), text.end(), inc), end; it != end; ++it) {
          INFO(e.path().string() << " includes " << (*it)[1]);
          CHECK(
              (fs::exists(prefix / "include" / (*it)[1].str()) ||
               (std::string(folder) != "include" && fs::exists(prefix / folder / (*it)[1].str()))));
        }
      }
    // Relative RPATHs into the prefix, so that it can be moved as a whole; then, for a
    // LibTorch outside the system's folders (the wheel's), its own folders, absolute.
    auto check_runpath = [&](const fs::path& elf, const std::string& relative) {
      const auto rp = runpath(elf);
      INFO(elf.string() << ": " << rp);
      CHECK(rp.substr(0, rp.find(':')) == relative);
      CHECK(rp.find(prefix.string()) == std::string::npos);
      const std::string torch_lib = WICK_TORCH_LIB_DIR;
      if (torch_lib.rfind("/usr/", 0) != 0) CHECK_THAT(rp, Catch::Contains(":" + torch_lib));
    };
    check_runpath(prefix / "bin" / "wick", "$ORIGIN/../lib");
    check_runpath(prefix / "lib/wick/plugins/wick_synthetic.so", "$ORIGIN/../..");
    check_runpath(prefix / "lib/wick/plugins/wick_fashion_mnist.so", "$ORIGIN/../..");
  }

  // Every built-in plugin's folder includes only SDK headers; the folders whose CMakeLists.txt
  // does more than one wick_add_plugin call (ddp, cuda_graph), and checkpoint for the plain
  // ones, are built as they stand against the installed package alone (find_package(wick) +
  // the folder's own CMakeLists.txt). The plain folders differ from checkpoint's only in
  // their sources, which the in-tree build compiles with the same SDK headers. That build is
  // a property of the folders, made in one of make test's two builds (WICK_TEST_PLUGIN_FOLDERS).
  std::vector<std::string> built;
  {
    const std::regex inc(R"re(#include\s+[<"]wick/([^>"]+)[>"])re");
    const fs::path sdk_include = fs::path(WICK_SOURCE_DIR) / "sdk" / "include" / "wick";
    std::string subdirs;
    for (const auto& e : fs::directory_iterator(fs::path(WICK_SOURCE_DIR) / "plugins")) {
      if (!fs::exists(e.path() / "CMakeLists.txt")) continue;
      std::istringstream lines(read_file(e.path() / "CMakeLists.txt"));
      int statements = 0;
      for (std::string l; std::getline(lines, l);)
        if (l.find_first_not_of(" \t") != std::string::npos && l[l.find_first_not_of(" \t")] != '#')
          ++statements;
      const auto name = e.path().filename().string();
      if (statements > 1 || name == "checkpoint") {
        built.push_back(name);
        subdirs += "add_subdirectory(\"" + e.path().string() + "\" " + name + ")\n";
      }
      for (const auto& f : fs::directory_iterator(e.path())) {
        const auto text = read_file(f.path());
        for (std::sregex_iterator it(text.begin(), text.end(), inc), end; it != end; ++it) {
          INFO(f.path().string() << " includes wick/" << (*it)[1]);
          CHECK(fs::exists(sdk_include / (*it)[1].str()));
        }
      }
    }
    CHECK(built.size() >= 2);
    if (!WICK_TEST_PLUGIN_FOLDERS) built.clear();  // built by the other build's test
    const auto project = kScratch / "builtins";
    if (!built.empty()) {
      fs::create_directories(project);
      write_file(project / "CMakeLists.txt",
                 "cmake_minimum_required(VERSION 3.18)\nproject(builtins CXX)\n"
                 "find_package(wick CONFIG REQUIRED)\n" +
                     subdirs);
      // In batches, as the in-tree build compiles them (wick_unity): LibTorch's headers cost
      // most of a source's compile, paid once per plugin (ddp has 3 sources, zero3 2) rather
      // than once per source: this test 106 s alone where it took 130 (2 cores).
      build_project(project, project / "build", prefix, {"-DCMAKE_UNITY_BUILD=ON"});
    }
    for (const auto& name : built) {
      INFO(name);
      // cuda_graph builds nothing against a wick without CUDA (its CMakeLists.txt reads
      // WICK_CUDA from the package).
      if (name == "cuda_graph" && !WICK_BUILT_WITH_CUDA) {
        CHECK_FALSE(fs::exists(project / "build" / name / "wick_cuda_graph.so"));
        continue;
      }
      // One plugin (wick_NAME.so) or a library of several (wicklib_NAME.so).
      CHECK((fs::exists(project / "build" / name / ("wick_" + name + ".so")) ||
             fs::exists(project / "build" / name / ("wicklib_" + name + ".so"))));
    }
  }

  // samples/gpt on its own, as its CMakeLists.txt says: the task plugin and wick_gpt_generate
  // (a host program: wick::host) built against the package, trained by the installed wick and
  // generating text (in the build that builds the plugin folders).
  if (WICK_TEST_PLUGIN_FOLDERS) {
    const auto gpt = kScratch / "gpt";
    build_project(fs::path(WICK_SOURCE_DIR) / "samples" / "gpt", gpt / "build", prefix,
                  {"-DCMAKE_UNITY_BUILD=ON"});
    // Byte tokens (tokenize.py's layout: little-endian uint16) of wick's README.
    std::string text = read_file(fs::path(WICK_SOURCE_DIR) / "README.md"), tokens;
    for (const unsigned char c : text) tokens += {static_cast<char>(c), '\0'};
    fs::create_directories(gpt / "data");
    write_file(gpt / "data" / "train.bin", tokens);
    write_file(gpt / "data" / "valid.bin", tokens.substr(tokens.size() - 2 * 4096));
    // The package's own wick_gpt.so set aside while its out-of-tree build is the one found.
    const auto installed = prefix / "lib/wick/plugins/wick_gpt.so";
    REQUIRE(fs::exists(installed));
    fs::rename(installed, gpt / "installed_wick_gpt.so");
    const auto gpt_cfg = gpt / "gpt.toml";
    write_file(gpt_cfg, read_file(fs::path(WICK_SOURCE_DIR) / "samples" / "gpt" / "gpt.toml") +
                            "[plugins]\npath = \"build\"\n");
    require_ok(run({wick, "fit", gpt_cfg.string(), "--set", "trainer.epochs=1", "--set",
                    "trainer.steps_per_epoch=4", "--set",
                    "trainer.output_dir=" + (gpt / "run").string(), "--set", "trainer.threads=1"}),
               "wick fit gpt.toml");
    const auto g = run({(gpt / "build" / "wick_gpt_generate").string(), gpt_cfg.string(), "--set",
                        "trainer.output_dir=" + (gpt / "run").string(), "--set",
                        "trainer.threads=1", "--prompt", "GNU", "--tokens", "5"});
    require_ok(g, "wick_gpt_generate");
    CHECK(g.out.size() == 3 + 5 + 1);  // the prompt, 5 bytes and a newline
    CHECK(g.out.rfind("GNU", 0) == 0);
    fs::rename(gpt / "installed_wick_gpt.so", installed);
  }

  // The sample project, and a project fresh from `wick new-plugin`, unedited.
  const auto ext_build = kScratch / "external_plugin";
  build_project(fs::path(WICK_SOURCE_DIR) / "samples" / "external_plugin", ext_build, prefix);
  // wick_add_plugin out of tree: C++17, hidden visibility, LibTorch's flags via wick::wick.
  {
    auto cc = read_json(ext_build / "compile_commands.json");
    REQUIRE(cc.size() == 1);
    const auto cmd = cc[0]["command"].get<std::string>();
    INFO(cmd);
    CHECK_THAT(cmd, Catch::Contains("-std=c++17"));
    CHECK_THAT(cmd, Catch::Contains("-fvisibility=hidden"));
    // LibTorch's own compile flags (Debian's: -D_GLIBCXX_USE_CXX11_ABI=1; the wheel's: none).
    std::istringstream flags(WICK_TORCH_CXX_FLAGS);
    for (std::string f; flags >> f;) CHECK_THAT(cmd, Catch::Contains(f));
    CHECK_THAT(cmd, Catch::Contains((prefix / "include").string()));
    // No folder of LibTorch's MKL settings that does not exist (its /lib/intel64 and Windows
    // folders) on the plugin's run path.
    const auto rp = runpath(ext_build / "wick_loss_ema.so");
    INFO(rp);
    CHECK(rp.find("intel64") == std::string::npos);
    CHECK(rp.find("win-x64") == std::string::npos);
  }
  const auto fresh = kScratch / "my_first";
  auto r = run({wick, "new-plugin", "my_first", "--dir", fresh.string()});
  require_ok(r, "wick new-plugin");
  CHECK_THAT(r.out, Catch::Contains("-DCMAKE_PREFIX_PATH=" + prefix.string()));
  build_project(fresh, fresh / "build", prefix);
  {
    // A project's own newer standard stands: wick::wick asks for C++17 at least.
    const auto cxx20 = kScratch / "my_first_cxx20";
    build_project(fresh, cxx20, prefix, {"-DCMAKE_CXX_STANDARD=20"}, /*compile=*/false);
    auto cc = read_json(cxx20 / "compile_commands.json");
    REQUIRE(cc.size() == 1);
    CHECK_THAT(cc[0]["command"].get<std::string>(), Catch::Contains("-std=c++20"));
  }
  r = run({wick, "new-plugin", "my_first", "--dir", fresh.string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("refusing to overwrite '" + fresh.string() + "'"));

  r = run({wick, "plugins", "--plugin-path", ext_build.string(), "--plugin-path",
           (fresh / "build").string()});
  require_ok(r, "wick plugins");
  CHECK_THAT(r.out, Catch::Contains("loss_ema 1.0.0 (hook, order 50"));
  CHECK_THAT(r.out, Catch::Contains((ext_build / "wick_loss_ema.so").string()));
  CHECK_THAT(r.out, Catch::Contains("my_first 0.1.0 (hook, order 0"));
  CHECK_THAT(r.out, Catch::Contains((fresh / "build" / "wick_my_first.so").string()));
  CHECK_THAT(r.out, Catch::Contains((prefix / "lib/wick/plugins/wick_synthetic.so").string()));
  CHECK(r.err.empty());

  const auto cfg = kScratch / "both.toml";
  write_file(cfg,
             "[trainer]\nepochs = 3\nbatch_size = 32\nlog_every = 4\n"
             "output_dir = \"" +
                 (kScratch / "run").string() +
                 "\"\n"
                 "[task]\nplugin = \"synthetic\"\nsamples = 256\nvalid_samples = 64\n"
                 "[plugins]\npath = [\"external_plugin\", \"my_first/build\"]\n"
                 "[[hooks]]\nplugin = \"loss_ema\"\n"
                 "[[hooks]]\nplugin = \"my_first\"\ntarget = 0.01\n");
  r = run({wick, "describe", cfg.string()});
  require_ok(r, "wick describe");
  CHECK(std::regex_search(r.out, std::regex(R"(\| after_loss +\| loss_ema +\| +50 \|)")));
  CHECK(std::regex_search(r.out, std::regex(R"(\| after_epoch +\| my_first +\| +0 \|)")));

  r = run({wick, "fit", cfg.string()});
  require_ok(r, "wick fit");
  auto s = read_json(kScratch / "run" / "summary.json");
  CHECK(s["status"] == "completed");
  CHECK(s["epochs"] == 1);  // my_first: accuracy >= 0.01 after the first epoch
  int ema = 0;
  for (const auto& l : read_jsonl(kScratch / "run" / "metrics.jsonl"))
    if (l.contains("train/loss_ema")) ++ema;
  CHECK(ema >= 2);  // 8 steps, a record every 4

  // The snippet `new-plugin` wrote is a valid config as it stands.
  r = run({wick, "check", (fresh / "my_first.toml").string()});
  require_ok(r, "wick check my_first.toml");

  // Moved elsewhere, the install still finds its libwick and its plugins.
  const auto moved = kScratch / "moved";
  fs::rename(prefix, moved);
  r = run({(moved / "bin" / "wick").string(), "plugins"});
  require_ok(r, "moved wick plugins");
  CHECK_THAT(r.out, Catch::Contains((moved / "lib/wick/plugins/wick_synthetic.so").string()));

  fs::remove_all(kScratch / "run");
}
