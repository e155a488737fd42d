#include "wick/launch.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>

namespace wick {

namespace {

std::atomic<int> g_signal{0};
void on_signal(int s) {
  g_signal.store(s);
}

using Clock = std::chrono::steady_clock;

struct Rank {
  int rank = 0, local = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int fds[2] = {-1, -1};  // stdout, stderr read ends
  std::string partial[2];
};

// Writes complete lines of buf, each prefixed; keeps the unfinished tail in partial.
void emit_lines(std::string& partial, const char* buf, std::size_t n, const std::string& prefix,
                std::FILE* f) {
  partial.append(buf, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::fputs(prefix.c_str(), f);
    std::fwrite(partial.data() + start, 1, nl + 1 - start, f);
  }
  partial.erase(0, start);
  std::fflush(f);
}

// The environment of one rank: torchrun's variables.
std::vector<ChildEnv> rank_env(const LaunchOptions& o, const Rank& r) {
  const int world = o.nnodes * o.nproc;
  std::vector<ChildEnv> env = {{"RANK", std::to_string(r.rank)},
                               {"LOCAL_RANK", std::to_string(r.local)},
                               {"WORLD_SIZE", std::to_string(world)},
                               {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
                               {"GROUP_RANK", std::to_string(o.node_rank)},
                               {"MASTER_ADDR", o.master_addr},
                               {"MASTER_PORT", std::to_string(o.master_port)}};
  // Several ranks on one node must not each start a thread per core: with trainer.threads =
  // "auto" each takes its share of the free cores (LOCAL_WORLD_SIZE), where torchrun would set
  // OMP_NUM_THREADS=1 and leave cores idle.
  return env;
}

}  // namespace

pid_t start_child(const std::vector<std::string>& command, int out_fd, int err_fd,
                  const std::vector<ChildEnv>& env) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Own process group: a terminal's Ctrl-C reaches the parent alone, which forwards it once
    // (the trainer treats a second SIGINT as "exit now"). Die with the parent.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    for (const auto& e : env) setenv(e.name.c_str(), e.value.c_str(), e.overwrite ? 1 : 0);
    // The signals the wick command ignores (an ignored signal stays so across exec) are the
    // program's own to take.
    std::signal(SIGPIPE, SIG_DFL);
    std::signal(SIGXFSZ, SIG_DFL);
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "wick: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so that a signal sent right away reaches the group
  return pid;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    const char* name = sigabbrev_np(s);
    return "killed by signal " + std::to_string(s) +
           (name ? " (SIG" + std::string(name) + ")" : "");
  }
  return "status " + std::to_string(status);
}

void check_launch_options(const LaunchOptions& o) {
  if (o.nproc < 1 || o.nproc > kMaxLocalRanks)
    throw std::invalid_argument("--nproc must be in [1, " + std::to_string(kMaxLocalRanks) +
                                "] (ranks on this node)");
  if (o.nnodes < 1) throw std::invalid_argument("--nnodes must be >= 1");
  // WORLD_SIZE is an int for every rank's c10d.
  if (static_cast<std::int64_t>(o.nnodes) * o.nproc > std::numeric_limits<int>::max())
    throw std::invalid_argument("--nnodes x --nproc must be at most " +
                                std::to_string(std::numeric_limits<int>::max()));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw std::invalid_argument("--node-rank must be in [0, " + std::to_string(o.nnodes) +
                                ") for --nnodes " + std::to_string(o.nnodes));
  if (o.master_port < 0 || o.master_port > 65535)
    throw std::invalid_argument("--master-port must be in [1, 65535] (0: pick a free one)");
  if (o.nnodes > 1 && o.master_port == 0)
    throw std::invalid_argument(
        "--master-port is required with --nnodes > 1: every node must use the same port");
  // Finite: the SIGKILL's time is a clock's point (inf or NaN would put it in the past).
  if (!(o.grace_s >= 0 && o.grace_s <= kMaxGraceS))
    throw std::invalid_argument("--grace must be seconds in [0, " +
                                std::to_string(static_cast<int>(kMaxGraceS)) + "]");
  if (o.max_restarts < 0)
    throw std::invalid_argument("--max-restarts must be >= 0 (0: never restart)");
  if (o.command.empty())
    throw std::invalid_argument(
        "no command to run; give it after '--', e.g. "
        "wick launch --nproc 2 -- wick fit cfg.toml");
}

namespace {

// The first port of the range the kernel draws from for bind(port 0) and for outgoing
// connections (Gloo's pair sockets, TCPStore's clients); Linux's default when /proc cannot be
// read.
int first_ephemeral_port() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  return f >> low >> high && low > 0 && high >= low ? low : 32768;
}

// Whether a TCP server could listen on `port` now, on every address as rank 0's store does.
bool can_listen(int port) {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  const int on = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // as the store sets it
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(s);
  return ok;
}

}  // namespace

int pick_free_port() {
  // The port is free when picked and bound by rank 0 a second later. Inside the ephemeral
  // range any process's next connection may take it meanwhile (on a busy machine, other
  // ranks' Gloo sockets can: rank 0 then cannot listen); below it only explicit binds compete.
  const int low = first_ephemeral_port();
  constexpr int kFrom = 10000;
  if (low - kFrom >= 1000) {
    std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
    std::uniform_int_distribution<int> port(kFrom, low - 1);
    for (int tries = 0; tries < 100; ++tries)
      if (const int p = port(rng); can_listen(p)) return p;
  }
  // A small or unusual range: the kernel's choice.
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    int e = errno;
    close(s);
    throw std::runtime_error(std::string("cannot find a free port: ") + std::strerror(e));
  }
  close(s);
  return ntohs(a.sin_port);
}

std::vector<std::string> with_resume_auto(const std::vector<std::string>& command) {
  std::vector<std::string> out;
  bool replaced = false;
  for (std::size_t i = 0; i < command.size(); ++i) {
    if (i > 0 && command[i] == "--resume" && i + 1 < command.size()) {
      out.insert(out.end(), {"--resume", "auto"});
      ++i;
      replaced = true;
    } else if (i > 0 && command[i].rfind("--resume=", 0) == 0) {
      out.push_back("--resume=auto");
      replaced = true;
    } else {
      out.push_back(command[i]);
    }
  }
  if (!replaced) out.insert(out.end(), {"--resume", "auto"});
  return out;
}

namespace {

// One start of every local rank, until all have ended.
LaunchResult run_ranks(const LaunchOptions& o, std::FILE* out, std::FILE* err) {
  LaunchResult res;
  res.master_port = o.master_port;

  // The signals a rank treats as "stop at the next step boundary" (wick/trainer.hpp).
  const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
  struct sigaction sa {};
  struct sigaction old[std::size(forwarded)]{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  g_signal.store(0);
  for (std::size_t i = 0; i < std::size(forwarded); ++i) sigaction(forwarded[i], &sa, &old[i]);
  std::fflush(out);
  std::fflush(err);

  std::vector<Rank> ranks(static_cast<std::size_t>(o.nproc));
  for (int i = 0; i < o.nproc; ++i) {
    // A stop signal while ranks start: the ones started get it (below), no more start.
    if (g_signal.load() != 0) {
      ranks.resize(static_cast<std::size_t>(i));
      break;
    }
    Rank& r = ranks[static_cast<std::size_t>(i)];
    r.local = i;
    r.rank = o.node_rank * o.nproc + i;
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = start_child(o.command, po[1], pe[1], rank_env(o, r));
    close(po[1]);
    close(pe[1]);
    r.pid = pid;
    r.running = true;
    r.fds[0] = po[0];
    r.fds[1] = pe[0];
  }

  bool ending = false, killed = false, nudged = false;
  int interrupted = 0;    // the first stop signal: forwarded, or one a rank stopped on
  int stopped_rank = -1;  // the rank that stopped on a signal of its own (-1: forwarded)
  Clock::time_point kill_at{};
  // Each rank leads its own process group: signalling the group reaches what it started too
  // (a shell's children would otherwise keep its output pipe open).
  auto end_others = [&](int sig) {
    for (auto& r : ranks) kill(-r.pid, sig);
  };
  // Ranks that stop write the cancel checkpoint (rank 0) and summary.json first: they get
  // the grace period and stop_wait_s more before the stop signal (when a rank stopped on its
  // own) or SIGKILL (when it was the launcher's, forwarded).
  auto wait_for_stops = [&] {
    if (ending) return;
    ending = true;
    kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(o.grace_s + o.stop_wait_s));
  };

  for (;;) {
    // Output first, so that a failing rank's last words come before the launcher's verdict.
    std::vector<pollfd> pfds;
    std::vector<std::pair<Rank*, int>> who;
    for (auto& r : ranks)
      for (int k = 0; k < 2; ++k)
        if (r.fds[k] >= 0) {
          pfds.push_back({r.fds[k], POLLIN, 0});
          who.emplace_back(&r, k);
        }
    bool any_running = false;
    for (auto& r : ranks) any_running |= r.running;
    if (pfds.empty() && !any_running) break;
    if (!pfds.empty()) {
      int n = poll(pfds.data(), pfds.size(), 100);
      if (n > 0) {
        for (std::size_t i = 0; i < pfds.size(); ++i) {
          if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          auto [r, k] = who[i];
          char buf[65536];
          ssize_t got = read(r->fds[k], buf, sizeof buf);
          const std::string prefix = "[rank " + std::to_string(r->rank) + "] ";
          std::FILE* f = k == 0 ? out : err;
          if (got > 0) {
            emit_lines(r->partial[k], buf, static_cast<std::size_t>(got), prefix, f);
          } else if (got == 0 || errno != EINTR) {
            if (!r->partial[k].empty()) emit_lines(r->partial[k], "\n", 1, prefix, f);
            close(r->fds[k]);
            r->fds[k] = -1;
          }
        }
      }
    } else {
      usleep(20000);
    }

    if (int s = g_signal.exchange(0)) {
      // Forward the launcher's signal to every rank; they stop as they would alone.
      if (!interrupted) interrupted = s;
      end_others(s);
      wait_for_stops();
    }

    Rank* first = nullptr;
    for (auto& r : ranks) {
      if (!r.running) continue;
      int st = 0;
      if (waitpid(r.pid, &st, WNOHANG) != r.pid) continue;
      r.running = false;
      r.status = st;
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      // After a forwarded interrupt, ranks ending with 130 or by signal are expected, not the
      // cause; after a first failure, the others' endings are our doing.
      if (ok || interrupted || res.failed_rank >= 0) continue;
      // A rank that exits 128 + a stop signal sent to it stopped, it did not fail; so did one
      // that a stop signal ended before it could handle one (early in its start). The ranks
      // agree on a stop signal that reached any of them, and the others stop at the same
      // step, rank 0 writing the cancel checkpoint: ending them now would lose it.
      if (const int sig = WIFEXITED(st) ? WEXITSTATUS(st) - 128 : WTERMSIG(st);
          std::find(std::begin(forwarded), std::end(forwarded), sig) != std::end(forwarded)) {
        interrupted = sig;
        stopped_rank = r.rank;
        std::fprintf(err,
                     "wick launch: rank %d (local rank %d, pid %d) stopped on SIG%s; waiting "
                     "for the others to end\n",
                     r.rank, r.local, static_cast<int>(r.pid), sigabbrev_np(interrupted));
        std::fflush(err);
        wait_for_stops();
        continue;
      }
      // Of ranks found dead together, one killed by a signal is likelier the cause: its peers
      // exit with an error code once their collectives notice it is gone.
      if (!first || (WIFSIGNALED(st) && !WIFSIGNALED(first->status))) first = &r;
    }
    if (first) {
      res.failed_rank = first->rank;
      res.reason = describe_wait_status(first->status);
      std::fprintf(err,
                   "wick launch: rank %d (local rank %d, pid %d) failed: %s; ending the other "
                   "ranks\n",
                   first->rank, first->local, static_cast<int>(first->pid), res.reason.c_str());
      std::fflush(err);
      ending = true;
      end_others(SIGTERM);
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(o.grace_s));
    }
    if (ending && !killed && Clock::now() >= kill_at) {
      std::string left;
      for (const auto& r : ranks)
        if (r.running) left += (left.empty() ? "" : ", ") + std::to_string(r.rank);
      if (left.empty()) {
        killed = true;  // every rank has ended; only a pipe of theirs was still open
      } else if (stopped_rank >= 0 && !nudged) {
        // A rank stopped on its own signal, and these have not followed in the grace period
        // and stop_wait_s (one waiting at the start for the rank that is gone, which no step's
        // agreement reaches): they get that signal, which ends a rank at the start at once,
        // and SIGKILL after --grace more.
        nudged = true;
        std::fprintf(err,
                     "wick launch: rank(s) %s still running %g s after rank %d stopped; "
                     "sending them SIG%s\n",
                     left.c_str(), o.grace_s + o.stop_wait_s, stopped_rank,
                     sigabbrev_np(interrupted));
        end_others(interrupted);
        kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o.grace_s));
      } else {
        killed = true;
        std::fprintf(err, "wick launch: rank(s) %s did not end in time; SIGKILL\n", left.c_str());
        end_others(SIGKILL);
      }
      std::fflush(err);
    }
  }

  for (std::size_t i = 0; i < std::size(forwarded); ++i) sigaction(forwarded[i], &old[i], nullptr);
  if (res.failed_rank >= 0) {
    const auto& st =
        ranks[static_cast<std::size_t>(res.failed_rank - o.node_rank * o.nproc)].status;
    res.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    std::fprintf(err, "wick launch: failed: rank %d %s\n", res.failed_rank, res.reason.c_str());
  } else if (interrupted) {
    res.exit_code = 128 + interrupted;
    if (stopped_rank >= 0)
      std::fprintf(err, "wick launch: stopped by SIG%s (rank %d ended first)\n",
                   sigabbrev_np(interrupted), stopped_rank);
    else
      std::fprintf(err, "wick launch: stopped by SIG%s (forwarded to every rank)\n",
                   sigabbrev_np(interrupted));
  }
  std::fflush(err);
  return res;
}

}  // namespace

LaunchResult launch(const LaunchOptions& opts, std::FILE* out, std::FILE* err) {
  check_launch_options(opts);
  LaunchOptions o = opts;
  const bool pick_port = o.master_port == 0;
  for (int restarts = 0;; ++restarts) {
    // A fresh port for each start: the last one's store may still hold it.
    if (pick_port) o.master_port = pick_free_port();
    LaunchResult res = run_ranks(o, out, err);
    res.restarts = restarts;
    if (res.failed_rank < 0 || restarts >= o.max_restarts) return res;
    o.command = with_resume_auto(opts.command);
    std::fprintf(err,
                 "wick launch: restart %d of %d: starting every rank again with --resume auto\n",
                 restarts + 1, o.max_restarts);
    std::fflush(err);
  }
}

}  // namespace wick
