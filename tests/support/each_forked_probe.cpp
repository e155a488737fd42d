// A test program with a case of each outcome, for test_each_forked: ctest never runs it as a
// test of its own (most of its cases fail on purpose).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "support.hpp"

namespace {
int g_runs = 0;  // each case's process starts from the value before any case ran
}  // namespace

TEST_CASE("passes") {
  CHECK(++g_runs == 1);
  // A static one has no destructor run at the fast exit: main removes its folder.
  static wick::test::TempDir kept;
  std::printf("probe's static folder: %s\n", kept.path().c_str());
}
TEST_CASE("passes in a process of its own too") {
  CHECK(++g_runs == 1);
}
TEST_CASE("fails") {
  CHECK(1 + 1 == 3);
}
TEST_CASE("skips itself") {
  wick::test::skip("the probe's skip");
}
TEST_CASE("dies of a signal") {
  raise(SIGKILL);
}
TEST_CASE("runs past its time") {
  std::this_thread::sleep_for(std::chrono::seconds(60));
}
TEST_CASE("a name with , [brackets] * ~ \\ and \"quotes\" runs alone") {
  CHECK(++g_runs == 1);
}
TEST_CASE("a hidden case does not run", "[.]") {
  CHECK(false);
}
