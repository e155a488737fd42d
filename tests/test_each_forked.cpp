// The runner of the trees where a ctest test is a whole test program (support/each_forked.hpp,
// WICK_TEST_EACH_FORKED): each case in a process of its own, each outcome reported, a failure
// of any case the program's failure.
#include <map>
#include <regex>
#include <sstream>

#include "support.hpp"

using namespace wick::test;

TEST_CASE("a test program run --each-forked runs each case in a fork and reports each outcome") {
  auto r = run({WICK_EACH_FORKED_PROBE, "--each-forked", "5"});
  INFO(r.out << r.err);
  // 5 s: the sleeping case is killed; the others take a fraction of a second, even on a busy
  // machine.
  CHECK(r.exit_code == 1);  // some cases failed
  std::map<std::string, std::string> outcome;
  const std::regex line(R"(wick test: \[\d+/7\] (.+) in [0-9.]+ s: (.+))");
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line)) outcome[m[2]] = m[1];
  }
  CHECK(outcome == std::map<std::string, std::string>{
                       {"passes", "passed"},
                       {"passes in a process of its own too", "passed"},
                       {"fails", "FAILED (exit 1)"},
                       {"skips itself", "skipped"},
                       {"dies of a signal", "FAILED (signal 9)"},
                       {"runs past its time", "FAILED (past 5 s, killed)"},
                       {"a name with , [brackets] * ~ \\ and \"quotes\" runs alone", "passed"}});
  CHECK(r.out.find(": 3 passed, 1 skipped, 3 failed\n") != std::string::npos);
  CHECK(r.out.find("SKIPPED: the probe's skip") != std::string::npos);
  CHECK(r.out.find("  FAILED: runs past its time\n") != std::string::npos);

  // A static TempDir's folder is removed at the exit that skips static destructors, in a
  // fork and in a program run the ordinary way.
  auto alone = run({WICK_EACH_FORKED_PROBE, "passes"});
  CHECK(alone.exit_code == 0);
  for (const auto* out : {&r.out, &alone.out}) {
    const std::string key = "probe's static folder: ";
    const auto at = out->find(key);
    REQUIRE(at != std::string::npos);
    const fs::path folder = out->substr(at + key.size(), out->find('\n', at) - at - key.size());
    CHECK(folder.string().find("wick-test-") != std::string::npos);
    CHECK_FALSE(fs::exists(folder));
  }
}
