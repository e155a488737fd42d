// The plugin loader against purpose-built bad libraries (tests/plugins/bad/): each is refused
// with its own PluginError kind and a message that names the file and the fix; none crashes.
#include <sys/stat.h>
#include <torch/version.h>

#include "support.hpp"
#include "wick/config.hpp"
#include "wick/loader.hpp"

using namespace wick::test;
using Kind = wick::PluginError::Kind;

namespace {

const fs::path kBad = fs::path(WICK_BINARY_DIR) / "tests" / "bad";
const fs::path kGood = fs::path(WICK_TEST_PLUGIN_DIR);

// Runs f, which must throw a PluginError of kind k; returns its message.

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a good plugin loads, with its info read before the factory runs") {
  auto lib = wick::load_plugin_library((kGood / "wick_recorder.so").string());
  const auto& i = lib->info();
  CHECK(i.name == "recorder");
  CHECK(i.kind == wick::PluginKind::hook);
  CHECK(i.api_major == WICK_API_MAJOR);
  CHECK(i.path == fs::canonical(kGood / "wick_recorder.so").string());
  // Its build record: the LibTorch this build compiled it against.
  CHECK(i.torch_build.rfind("LibTorch " TORCH_VERSION " (", 0) == 0);
  REQUIRE(i.params.size() == 4);
  CHECK(i.params[0].key == "path");
  CHECK_FALSE(i.params[0].default_toml.has_value());  // required
  CHECK(i.params[1].default_toml == std::optional<std::string>("[]"));
  // The same file twice is the same library object.
  CHECK(wick::load_plugin_library((kGood / "wick_recorder.so").string()) == lib);
}

TEST_CASE("a shared object that is not a wick plugin") {
  const auto p = (kBad / "not_plugin" / "wick_not_plugin.so").string();
  auto msg = refused(Kind::not_a_plugin, [&] { wick::load_plugin_library(p); });
  CHECK(msg == "'" + p +
                   "' is not a wick plugin: it exports no 'wick_plugin_info' (a plugin "
                   "declares itself with WICK_PLUGIN(Class, ...) from <wick/plugin.hpp>)");
}

TEST_CASE("a plugin built against another LibTorch is refused before it is loaded, naming both") {
#ifndef WICK_OTHER_TORCH_VERSION
  skip("no second LibTorch to build a plugin against (WICK_OTHER_TORCH; make test installs both)");
#else
  const auto p = fs::canonical(kBad / "other_torch" / "wick_other_torch.so").string();
  auto msg = refused(Kind::torch_mismatch, [&] { wick::load_plugin_library(p); });
  INFO(msg);
  CHECK(has(msg, "'" + p + "' was built against LibTorch " WICK_OTHER_TORCH_VERSION " ("));
  CHECK(has(msg, ", but this wick runs on LibTorch " TORCH_VERSION " ("));
  CHECK(has(msg, "loading it would put a second LibTorch in this process"));
  CHECK(has(msg, "Rebuild the plugin against this wick"));
  // Built before SDK 2.5, it has no record: refused for the LibTorch library it links.
  const auto old = fs::canonical(kBad / "old_other_torch" / "wick_old_other_torch.so").string();
  auto old_msg = refused(Kind::torch_mismatch, [&] { wick::load_plugin_library(old); });
  INFO(old_msg);
  CHECK(has(old_msg, "'" + old +
                         "' has no LibTorch build record (built with wick's SDK before "
                         "2.5) and links libc10.so"));
  // `wick plugins` lists it as skipped, with the same reason, and goes on.
  auto r = run_wick({"plugins", "--plugin-path", (kBad / "other_torch").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(has(r.err,
            "wick: skipped: '" + p + "' was built against LibTorch " WICK_OTHER_TORCH_VERSION));
#endif
}

TEST_CASE("a plugin compiled with _GLIBCXX_DEBUG is refused before it is loaded, with the fix") {
  const auto p = fs::canonical(kBad / "debug_stl" / "wick_debug_stl.so").string();
  auto msg = refused(Kind::torch_mismatch, [&] { wick::load_plugin_library(p); });
  INFO(msg);
  CHECK(has(msg, "'" + p + "' was compiled with -D_GLIBCXX_DEBUG and this wick without it"));
  CHECK(has(msg,
            "Rebuild it without _GLIBCXX_DEBUG (-D_GLIBCXX_ASSERTIONS checks without "
            "changing the layout)"));
}

TEST_CASE("an info record without the wick signature") {
  const auto p = (kBad / "bad_magic" / "wick_bad_magic.so").string();
  auto msg = refused(Kind::not_a_plugin, [&] { wick::load_plugin_library(p); });
  CHECK(msg == "'" + p +
                   "' is not a wick plugin: its 'wick_plugin_info' record has no wick "
                   "signature");
}

TEST_CASE("a plugin that exports its record as data, where wick calls a function, is refused") {
  for (const std::string folder : {"data_record", "data_pointer", "data_string"}) {
    const auto p = (kBad / folder / ("wick_" + folder + ".so")).string();
    auto msg = refused(Kind::not_a_plugin, [&] { wick::load_plugin_library(p); });
    CHECK(msg == "'" + p +
                     "' is not a wick plugin: its 'wick_plugin_info' is data, not the function "
                     "pointer wick calls (declare plugins with WICK_PLUGIN(Class, ...) or "
                     "WICK_PLUGINS(...) from <wick/plugin.hpp>)");
  }
}

TEST_CASE("a plugin file cut short (an interrupted copy) is refused, not mapped") {
  // dlopen maps a truncated file's segments and faults (SIGBUS) on the missing pages.
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  const auto whole = read_file(kGood / "wick_recorder.so");
  for (const std::size_t keep : {std::size_t{3000}, whole.size() / 2}) {
    INFO(keep << " of " << whole.size() << " bytes");
    const auto p = dir / ("wick_cut" + std::to_string(keep) + ".so");
    write_file(p, whole.substr(0, keep));
    auto msg = refused(Kind::load_failed, [&] { wick::load_plugin_library(p.string()); });
    CHECK(has(msg, "cannot load '" + p.string() + "': it is cut short: its headers reach byte "));
    CHECK(has(msg, "but the file has " + std::to_string(keep) + " bytes"));
  }
  // A cut-short library of plugins in the search path is skipped: the search goes on.
  write_file(dir / "wicklib_cut.so", whole.substr(0, 3000));
  wick::PluginFinder finder({dir.path().string(), kGood.string()});
  CHECK(finder.find("recorder")->info().name == "recorder");
}

TEST_CASE("a file that is not a shared object at all") {
  TempDir dir;
  write_file(dir / "wick_text.so", "this is not ELF\n");
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  auto msg = refused(Kind::load_failed,
                     [&] { wick::load_plugin_library((dir / "wick_text.so").string()); });
  CHECK(has(msg, "cannot load '" + (dir / "wick_text.so").string() + "': "));
  CHECK(has(msg, "(is it built for this machine, with its libraries installed?)"));
}

TEST_CASE("an SDK API version mismatch names both versions and the fix") {
  SECTION("a newer major") {
    const auto p = (kBad / "api_major" / "wick_api_major.so").string();
    auto msg = refused(Kind::api_mismatch, [&] { wick::load_plugin_library(p); });
    const auto got = std::to_string(WICK_API_MAJOR + 1) + "." + std::to_string(WICK_API_MINOR);
    CHECK(msg == "wrong SDK API version on plugin 'api_major' (" + p + "): got version " + got +
                     ", this wick supports " + std::to_string(WICK_API_MAJOR) + ".0 to " +
                     std::to_string(WICK_API_MAJOR) + "." + std::to_string(WICK_API_MINOR) +
                     " (same major, minor not newer); the plugin needs a newer wick: upgrade "
                     "wick, or rebuild the plugin against this wick's SDK");
  }
  SECTION("the same major with a newer minor") {
    const auto p = (kBad / "api_minor" / "wick_api_minor.so").string();
    auto msg = refused(Kind::api_mismatch, [&] { wick::load_plugin_library(p); });
    CHECK(has(msg, "wrong SDK API version on plugin 'api_minor' (" + p + "): got version " +
                       std::to_string(WICK_API_MAJOR) + "." + std::to_string(WICK_API_MINOR + 1)));
    CHECK(has(msg, "; the plugin needs a newer wick: upgrade wick"));
  }
}

TEST_CASE("a plugin that exports its info record but no factory") {
  const auto p = (kBad / "no_factory" / "wick_no_factory.so").string();
  auto msg = refused(Kind::missing_factory, [&] { wick::load_plugin_library(p); });
  CHECK(msg == "plugin 'no_factory' (" + p +
                   ") has no factory: it does not export "
                   "'wick_plugin_create' and 'wick_plugin_destroy' "
                   "(declare it with WICK_PLUGIN(Class, ...), which "
                   "exports them)");
}

TEST_CASE("two plugins with one name in two folders") {
  const auto d1 = (kBad / "twin1").string(), d2 = (kBad / "twin2").string();
  wick::PluginFinder finder({d1, d2});
  auto msg = refused(Kind::duplicate, [&] { finder.find("twin"); });
  CHECK(msg == "two plugins named 'twin': " + d1 + "/wick_twin.so and " + d2 +
                   "/wick_twin.so; remove one, or take its folder out of the plugin path");
  // `wick plugins` lists the first and reports the second instead of failing.
  auto scan = finder.scan();
  REQUIRE(scan.plugins.size() == 1);
  CHECK(scan.plugins[0]->info().path == d1 + "/wick_twin.so");
  REQUIRE(scan.problems.size() == 1);
  CHECK(has(scan.problems[0], "two plugins named 'twin'"));
}

TEST_CASE("a file named for one plugin that declares another") {
  wick::PluginFinder finder({(kBad / "misnamed").string()});
  const auto p = (kBad / "misnamed" / "wick_a.so").string();
  auto msg = refused(Kind::name_mismatch, [&] { finder.find("a"); });
  CHECK(msg == "'" + p + "' declares plugin 'b', not 'a'; name the file wick_b.so");
}

TEST_CASE("a plugin that is not found lists the folders searched") {
  wick::PluginFinder finder({kGood.string(), (kBad / "twin1").string()});
  auto msg = refused(Kind::not_found, [&] { finder.find("nosuch"); });
  CHECK(msg == "no plugin named 'nosuch' (looked for wick_nosuch.so in:\n  " + kGood.string() +
                   "\n  " + (kBad / "twin1").string() +
                   ")\nrun `wick plugins` to list what is installed, or add its folder to "
                   "[plugins] path or WICK_PLUGIN_PATH");
}

TEST_CASE("a world-writable plugin folder or file is refused") {
  TempDir dir;
  const auto folder = dir / "plugins";
  fs::create_directories(folder);
  fs::copy_file(kGood / "wick_typed.so", folder / "wick_typed.so");
  const auto file = (folder / "wick_typed.so").string();

  SECTION("folder") {
    REQUIRE(chmod(folder.c_str(), 0777) == 0);
    auto msg = refused(Kind::unsafe_path, [&] { wick::load_plugin_library(file); });
    CHECK(msg == "refusing plugin folder '" + folder.string() +
                     "': it is world-writable (mode 0777), so anyone could plant code in it; "
                     "run: chmod o-w '" +
                     folder.string() + "'");
    // Through the finder too, before anything is loaded from it.
    wick::PluginFinder finder({folder.string()});
    refused(Kind::unsafe_path, [&] { finder.find("typed"); });
    auto scan = finder.scan();
    CHECK(scan.plugins.empty());
    REQUIRE(scan.problems.size() == 1);
    CHECK(has(scan.problems[0], "refusing plugin folder"));
  }
  SECTION("file") {
    REQUIRE(chmod(folder.c_str(), 0755) == 0);
    REQUIRE(chmod(file.c_str(), 0666) == 0);
    auto msg = refused(Kind::unsafe_path, [&] { wick::load_plugin_library(file); });
    CHECK(msg == "refusing plugin file '" + file +
                     "': it is world-writable (mode 0666), so anyone could plant code in it; "
                     "run: chmod o-w '" +
                     file + "'");
  }
  SECTION("the same copy loads once the folder and file are safe") {
    REQUIRE(chmod(folder.c_str(), 0755) == 0);
    REQUIRE(chmod(file.c_str(), 0755) == 0);
    CHECK(wick::load_plugin_library(file)->info().name == "typed");
  }
}

TEST_CASE("the plugin search path never includes the current directory by default") {
  auto dirs = wick::plugin_search_path({});
  const auto cwd = fs::current_path().string();
  for (const auto& d : dirs) CHECK(d != cwd);
  // Relative WICK_PLUGIN_PATH entries are ignored: they would mean the current directory. The
  // user hears of it, once.
  setenv("WICK_PLUGIN_PATH", "relative/dir::/abs/dir", 1);
  std::vector<std::string> with_env;
  std::string out, err;
  capturing(
      [&] {
        with_env = wick::plugin_search_path({"/from/config"});
        (void)wick::plugin_search_path({});
      },
      out, err);
  unsetenv("WICK_PLUGIN_PATH");
  CHECK(err ==
        "wick: warning: WICK_PLUGIN_PATH entry 'relative/dir' is ignored: entries are "
        "absolute folders (a relative one would depend on the current directory); give " +
            (fs::current_path() / "relative" / "dir").string() + "\n");
  REQUIRE(with_env.size() >= 2);
  CHECK(with_env[0] == "/from/config");
  CHECK(with_env[1] == "/abs/dir");
  for (const auto& d : with_env) CHECK(d.find("relative") == std::string::npos);
}

TEST_CASE("`wick plugins` and `wick check` report bad libraries without crashing") {
  auto r =
      run_wick({"plugins", "--plugin-path", (kBad / "not_plugin").string(), "--plugin-path",
                (kBad / "api_major").string(), "--plugin-path", (kBad / "no_factory").string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(has(r.err, "wick: skipped: '" + (kBad / "not_plugin" / "wick_not_plugin.so").string() +
                       "' is not a wick plugin"));
  CHECK(has(r.err, "wick: skipped: wrong SDK API version on plugin 'api_major'"));
  CHECK(has(r.err, "wick: skipped: plugin 'no_factory'"));
  // The built-in plugins are still listed.
  CHECK(has(r.out, "synthetic 1.0.0 (task"));

  TempDir dir;
  write_file(dir / "cfg.toml", "[plugins]\npath = \"" + (kBad / "api_major").string() +
                                   "\"\n[[hooks]]\nplugin = \"api_major\"\n");
  auto c = run_wick({"check", (dir / "cfg.toml").string()});
  CHECK(c.exit_code == 2);
  CHECK(has(c.err, "wick: " + (dir / "cfg.toml").string() +
                       ":4:10: wrong SDK API version on plugin 'api_major'"));
}

TEST_CASE("a choice parameter declared wrongly is a bug of the plugin, named as such") {
  const auto bad_default = fs::canonical(kBad / "choice_default" / "wick_choice_default.so");
  const auto no_choices = fs::canonical(kBad / "choice_none" / "wick_choice_none.so");
  const std::string tail = " (a bug in the plugin, or not built with <wick/plugin.hpp>)";
  const std::string default_msg =
      "'" + bad_default.string() +
      "': malformed plugin record: plugin 'choice_default' parameter 0 ('mode'): its default "
      "\"quick\" is not one of its choices \"fast\", \"slow\" (fix its param_choice)" +
      tail;
  CHECK(refused(Kind::malformed, [&] { wick::load_plugin_library(bad_default.string()); }) ==
        default_msg);
  CHECK(refused(Kind::malformed, [&] { wick::load_plugin_library(no_choices.string()); }) ==
        "'" + no_choices.string() +
            "': malformed plugin record: plugin 'choice_none' parameter 0 ('mode'): a choice "
            "parameter with 0 choices (1 to 1024 expected; declare it with param_choice)" +
            tail);

  auto r = run_wick({"plugins", "--plugin-path", bad_default.parent_path().string()});
  CHECK(r.exit_code == 0);
  CHECK(has(r.err, "wick: skipped: " + default_msg + "\n"));

  // A config that uses it stops at the plugin's name (exit 2), not at a value of the user's.
  TempDir dir;
  write_file(dir / "cfg.toml", "[plugins]\npath = \"" + bad_default.parent_path().string() +
                                   "\"\n[[hooks]]\nplugin = \"choice_default\"\nmode = \"fast\"\n");
  r = run_wick({"check", (dir / "cfg.toml").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err == "wick: " + (dir / "cfg.toml").string() + ":4:10: " + default_msg + "\n");
}
