// A test program's cases run one by one, each in a fork of this process (the `--each-forked`
// run of support/main.cpp; tests/CMakeLists.txt: WICK_TEST_EACH_FORKED).
#pragma once

namespace wick::test {

// Starting a test program costs LibTorch's start (its operators' registration): 0.4 s with
// the wheel, 0.7 s with Debian's LibTorch, 1.6 s under ASan, as much as many cases take.
// Forked after that start, each case still runs in a process of its own, as ctest runs it
// (statics, signal handlers, leak check at exit), without paying it again. Prints each case's
// outcome and the count of each; returns 1 if a case failed, 77 (skipped) if every case
// skipped itself, else 0. A case that runs longer than timeout_s is killed and fails.
// catch_main: Catch's session run on a command line (Catch's Session is defined in main.cpp).
using CatchMain = int (*)(int argc, const char* const argv[]);
int run_each_forked(const char* program, int timeout_s, CatchMain catch_main);

}  // namespace wick::test
