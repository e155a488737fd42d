// The fatal-signal report, and those of a fit ended at once by a further stop signal or by
// exit(): everything the signal handlers touch is prepared before, and they call only
// async-signal-safe functions (write, open, rename, sigaction, raise, getpid).
#include "loop/crash_report.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "loop/dispatch.hpp"

namespace wick {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

const char* describe(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (invalid memory access)";
    case SIGBUS:
      return "SIGBUS (bus error: a mapped file cut short, or a misaligned access)";
    case SIGILL:
      return "SIGILL (illegal instruction: code built for another CPU?)";
    case SIGFPE:
      return "SIGFPE (arithmetic error: an integer division by zero?)";
    default:
      return "SIGABRT (aborted: a failed assertion, or a corrupted heap)";
  }
}

struct Armed {
  std::string file, tmp, head, tail;  // the summary is head + report + tail
};

struct Global {
  std::mutex mu;  // scopes and arming (the main thread's), never the handler
  const Dispatcher* loop = nullptr;
  long loop_thread = 0;
  pid_t pid = 0;  // the fit's process: a child forked during it reports nothing of it
  std::atomic<const Armed*> armed{nullptr};
  std::vector<std::unique_ptr<Armed>> kept;  // read by the handler until the last scope ends
  struct sigaction old[std::size(kSignals)]{};
  bool own_stack = false;  // the loop thread had no alternate stack: this one is ours
};
Global& g() {
  static auto* s = new Global;  // never destroyed: a crash in a static destructor still reads it
  return *s;
}

long this_thread() {
  return static_cast<long>(::syscall(SYS_gettid));
}

// A fixed buffer the handler writes into (no allocation there).
struct Text {
  char buf[2048];
  std::size_t n = 0;
  void add(const char* s, std::size_t len) {
    for (std::size_t i = 0; i < len && n < sizeof buf; ++i) buf[n++] = s[i];
  }
  void add(const char* s) { add(s, std::strlen(s)); }
  void add(std::string_view s) { add(s.data(), s.size()); }
  void add_number(unsigned long v) {
    char digits[24];
    std::size_t k = 0;
    do digits[k++] = static_cast<char>('0' + v % 10);
    while ((v /= 10) != 0);
    while (k > 0) add(&digits[--k], 1);
  }
  // As a JSON string's content.
  void add_json(const char* s, std::size_t len) {
    for (std::size_t i = 0; i < len; ++i) {
      const char c = s[i];
      if (c == '"' || c == '\\') add("\\", 1);
      if (static_cast<unsigned char>(c) < 0x20)
        add("?", 1);
      else
        add(&c, 1);
    }
  }
};

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// summary.json as failed with `what` as its error, where one is armed; whether it was written.
bool write_armed(const Text& what) {
  const Armed* a = g().armed.load();
  if (!a) return false;
  const int fd = ::open(a->tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  Text json;  // the summary's error is `what`, escaped
  json.add_json(what.buf, what.n);
  // Only a whole file replaces the summary (a full disk keeps "running").
  const bool whole = write_all(fd, a->head.data(), a->head.size()) &&
                     write_all(fd, json.buf, json.n) &&
                     write_all(fd, a->tail.data(), a->tail.size());
  ::close(fd);
  if (whole && ::rename(a->tmp.c_str(), a->file.c_str()) == 0) return true;
  ::unlink(a->tmp.c_str());
  return false;
}

// "wick: WHAT; summary.json says failed" on its own line of stderr, after writing it.
void say_and_write(const Text& what) {
  if (::getpid() != g().pid) return;  // a child forked during the fit: not the fit's end
  Text line;
  line.add("\nwick: ");
  line.add(what.buf, what.n);
  if (write_armed(what)) line.add("; summary.json says failed");
  line.add("\n");
  (void)write_all(2, line.buf, line.n);
}

// Where the loop was: " in plugin 'P' (instance 'I') at WHERE", on the loop's thread or not
// (which a signal another process sent does not tell: any thread may take it).
void add_place(Text& what, bool sent = false) {
  auto& s = g();
  if (!s.loop) return;
  if (!sent && this_thread() != s.loop_thread)
    what.add(
        " in a thread other than the training loop's (a data loader worker's, or a "
        "library's), while the loop was");
  if (const HookEntry* h = s.loop->running()) {
    what.add(" in plugin '");
    what.add(h->plugin);
    what.add("' (instance '");
    what.add(h->instance);
    what.add("')");
  }
  what.add(" at ");
  what.add(s.loop->where());
}

void report(int sig, const siginfo_t* info) {
  // kill(1) or another process's kill() or sigqueue(): no fault of the code the loop was
  // running, which is only where the loop was when it came (abort() and raise() send it to
  // their own process). Then the signal's name alone: its usual cause is not this one.
  const bool sent =
      info &&
      (info->si_code == SI_USER || info->si_code == SI_QUEUE || info->si_code == SI_TKILL) &&
      info->si_pid != ::getpid();
  Text what;
  what.add("fatal signal ");
  const char* d = describe(sig);
  what.add(d, sent ? std::strcspn(d, " ") : std::strlen(d));  // sent: the name alone
  if (sent) {
    what.add(", sent by another process (pid ");
    what.add_number(static_cast<unsigned long>(info->si_pid));
    what.add("), while the loop was");
  }
  add_place(what, sent);
  say_and_write(what);
}

// exit() or quick_exit() during a fit (a plugin's, or a library's): the fit would end
// without a word, and summary.json say "running".
void on_process_exit(int status) {
  if (!g().loop) return;  // no fit runs
  Text what;
  what.add("the process exited");
  if (status >= 0) {  // quick_exit's is not told
    char code[32];
    std::snprintf(code, sizeof code, " (status %d)", status);
    what.add(code);
  }
  what.add(" during the fit (a call of exit())");
  add_place(what);
  say_and_write(what);
}

void on_fatal(int sig, siginfo_t* info, void*) {
  static std::atomic<bool> reported{false};
  if (!reported.exchange(true)) report(sig, info);
  auto& s = g();
  for (std::size_t i = 0; i < std::size(kSignals); ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &s.old[i], nullptr);
  // A signal sent (abort, kill) is sent again; a fault returns, and the instruction faults
  // again under the handling it had before.
  if (!info || info->si_code <= 0) ::raise(sig);
}

}  // namespace

CrashReportScope::CrashReportScope(const Dispatcher& loop) {
  auto& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  outer_ = s.loop;
  s.loop = &loop;
  if (outer_) return;
  s.loop_thread = this_thread();
  s.pid = ::getpid();
  static const bool exits_watched = [] {
#ifdef __GLIBC__
    ::on_exit([](int status, void*) { on_process_exit(status); }, nullptr);
#else
    std::atexit([] { on_process_exit(-1); });
#endif
    std::at_quick_exit([] { on_process_exit(-1); });
    return true;
  }();
  (void)exits_watched;
  // A stack overflow (runaway recursion) leaves no stack to run the handler on: it runs on an
  // alternate one, the thread's own if it has one.
  stack_t st{};
  if (::sigaltstack(nullptr, &st) == 0 && (st.ss_flags & SS_DISABLE)) {
    static char* mem = new char[64 * 1024];
    st.ss_sp = mem;
    st.ss_size = 64 * 1024;
    st.ss_flags = 0;
    s.own_stack = ::sigaltstack(&st, nullptr) == 0;
  }
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;  // on the alternate stack where one is set
  sigemptyset(&sa.sa_mask);
  for (std::size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], &sa, &s.old[i]);
}

CrashReportScope::~CrashReportScope() {
  auto& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  s.loop = outer_;
  if (outer_) return;
  for (std::size_t i = 0; i < std::size(kSignals); ++i)
    ::sigaction(kSignals[i], &s.old[i], nullptr);
  if (s.own_stack) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
    s.own_stack = false;
  }
  s.armed.store(nullptr);
  s.kept.clear();
}

void CrashReportScope::arm_summary(const std::filesystem::path& file, const std::string& json,
                                   std::string_view marker) {
  const auto at = json.find(marker);
  if (at == std::string::npos) return;
  auto a = std::make_unique<Armed>();
  a->file = file.string();
  a->tmp = a->file + ".crash";
  a->head = json.substr(0, at);
  a->tail = json.substr(at + marker.size());
  auto& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.loop) return;  // no fit is reporting
  const Armed* now = a.get();
  s.kept.push_back(std::move(a));
  s.armed.store(now);
  // Re-armed at every epoch's end and checkpoint: a few kept, for a handler that read the
  // previous one just before.
  if (s.kept.size() > 4) s.kept.erase(s.kept.begin());
}

void CrashReportScope::disarm_summary() {
  g().armed.store(nullptr);
}

void CrashReportScope::report_exit_now(const char* signal_name) {
  Text what;
  what.add("ended at once by a further ");
  what.add(signal_name);
  what.add(", before the stop the first signal asked for was done");
  say_and_write(what);
}

}  // namespace wick
