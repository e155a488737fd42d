#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "each_forked.hpp"
#include "support.hpp"
#include "wick/system.hpp"

namespace {

// A test that dies of a signal prints where: Catch names the test case and its last
// assertion, then hands the signal back to the handler that was there before it (this one),
// which writes the stack (module+offset: `addr2line -e MODULE OFFSET`, or the function where
// it is exported) and dies of the same signal. The first GPU run crashed 175 tests and left
// only their names; ctest --output-on-failure keeps this.
void print_stack(int sig) {
  const char* name = strsignal(sig);
  const char head[] = "\nwick test: fatal signal, the stack (innermost first): ";
  (void)!write(2, head, sizeof head - 1);
  (void)!write(2, name, std::strlen(name));
  (void)!write(2, "\n", 1);
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

// Before Catch's main runs, so that Catch's own handler finds this one to hand on to.
[[maybe_unused]] const bool installed = [] {
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now, not inside a signal handler
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) signal(sig, print_stack);
  return true;
}();

// As `wick` does at start: a test run as another CPU (WICK_CPU_DISABLE, the [cpu-path] runs of
// tests/CMakeLists.txt) keeps LibTorch's and oneDNN's kernels off the hidden features too.
[[maybe_unused]] const bool cpu_paths_applied = [] {
  try {
    wick::apply_cpu_disable();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "wick test: %s\n", e.what());
    std::exit(2);
  }
  return true;
}();

// trainer.threads = "auto" picks the cores free when a fit starts: with ctest running two tests
// at once that differs from run to run, and tests that compare two fits bit for bit need the
// same count in both. One thread stands for "auto" in every fit the tests start (in process or
// through `wick`), as Debian's LibTorch defaults to here: two tests of two threads each on two
// cores would only wait on each other. Tests of the choice itself take it out of their child's
// environment; a test that wants more threads names them.
[[maybe_unused]] const bool threads_pinned = [] {
  setenv("OMP_NUM_THREADS", "1", /*overwrite=*/0);
  return true;
}();

}  // namespace

// `PROGRAM --each-forked SECONDS`: every case, each in a fork (support/each_forked.hpp), each
// killed past SECONDS; anything else is Catch's own command line.
// Either way the process ends without its static teardown (wick/system.hpp), as `wick` does.
int main(int argc, char* argv[]) {
  auto catch_main = [](int n, const char* const args[]) { return Catch::Session().run(n, args); };
  const int result = argc == 3 && std::strcmp(argv[1], "--each-forked") == 0
                         ? wick::test::run_each_forked(argv[0], std::atoi(argv[2]), catch_main)
                         : catch_main(argc, argv);
  wick::test::remove_live_temp_dirs();
  wick::exit_without_teardown(result);
}
