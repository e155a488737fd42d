#include "each_forked.hpp"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "support.hpp"  // kSkipped
#include "wick/system.hpp"

namespace wick::test {
namespace {

// The name as a Catch test spec that matches it alone: what the spec parser reads as a
// separator, tag, wildcard, negation or quote is taken literally after a backslash.
std::string spec_of(const std::string& name) {
  std::string spec;
  for (char c : name) {
    if (std::string_view("\\,[]*~\"").find(c) != std::string_view::npos) spec += '\\';
    spec += c;
  }
  return spec;
}

// The child: Catch runs the one case as `program "NAME" --warn NoTests` would, and ends as
// that process would (its temporary folders removed; under ASan the ordinary exit, with the
// leak check).
[[noreturn]] void run_case(const char* program, const std::string& name, CatchMain catch_main) {
  const std::string spec = spec_of(name);
  const char* argv[] = {program, spec.c_str(), "--warn", "NoTests", nullptr};
  const int result = catch_main(4, argv);
  remove_live_temp_dirs();
  wick::exit_without_teardown(result);
}

}  // namespace

int run_each_forked(const char* program, int timeout_s, CatchMain catch_main) {
  std::vector<std::string> names;
  for (const auto& test : Catch::getRegistryHub().getTestCaseRegistry().getAllTests())
    if (!test.isHidden()) names.push_back(test.getTestCaseInfo().name);
  std::vector<std::string> skipped, failed;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);  // nothing buffered is written twice, by the child too
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("wick test: fork");
      return 1;
    }
    if (pid == 0) run_case(program, names[i], catch_main);
    int status = 0;
    bool timed_out = false, lost = false;
    for (pid_t r; (r = waitpid(pid, &status, WNOHANG)) != pid;) {
      if (r < 0 && errno != EINTR) {
        lost = true;  // never "passed" for a case whose end was not seen
        break;
      }
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout_s)) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        timed_out = true;
        break;
      }
      const timespec poll{0, 5'000'000};
      nanosleep(&poll, nullptr);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string outcome = "passed";
    if (!lost && !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == kSkipped) {
      outcome = "skipped";
      skipped.push_back(names[i]);
    } else if (lost || timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      outcome = lost        ? "FAILED (waitpid: " + std::string(std::strerror(errno)) + ")"
                : timed_out ? "FAILED (past " + std::to_string(timeout_s) + " s, killed)"
                : WIFSIGNALED(status) ? "FAILED (signal " + std::to_string(WTERMSIG(status)) + ")"
                                      : "FAILED (exit " + std::to_string(WEXITSTATUS(status)) + ")";
      failed.push_back(names[i]);
    }
    std::printf("wick test: [%zu/%zu] %s in %.1f s: %s\n", i + 1, names.size(), outcome.c_str(),
                seconds, names[i].c_str());
  }
  std::printf("wick test: %zu cases, each in a fork of %s: %zu passed, %zu skipped, %zu failed\n",
              names.size(), program, names.size() - skipped.size() - failed.size(), skipped.size(),
              failed.size());
  for (const auto& n : skipped) std::printf("  skipped: %s\n", n.c_str());
  for (const auto& n : failed) std::printf("  FAILED: %s\n", n.c_str());
  if (!failed.empty()) return 1;
  return !names.empty() && skipped.size() == names.size() ? kSkipped : 0;
}

}  // namespace wick::test
