#include "wick/rendezvous.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cuda/cuda_support.hpp"
#include "loop/stop_signals.hpp"
#include "wick/params.hpp"

namespace wick {

namespace {

// Gloo writes to its sockets with writev, and a write to a peer that is gone raises SIGPIPE,
// whose default ends this rank at once, without a word (Python ignores it, so torch's own
// ranks never see it). Ignored, the write fails with EPIPE, which reaches the caller as an
// error naming the peer. A handler the program installed stays.
void ignore_sigpipe() {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, nullptr);
}

}  // namespace

c10::intrusive_ptr<c10d::Store> rendezvous(int rank, int world, std::chrono::milliseconds timeout,
                                           const std::string& prefix, const std::string& who) {
  ignore_sigpipe();
  // Empty is unset, as a launcher that clears them leaves them.
  auto var = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? v : nullptr;
  };
  const char* addr = var("MASTER_ADDR");
  const char* port_text = var("MASTER_PORT");
  const long port = port_text ? std::atol(port_text) : 0;
  if (!addr || !port_text)
    throw ConfigError(who + ": WORLD_SIZE is " + std::to_string(world) + " but " +
                      (addr        ? "MASTER_PORT is"
                       : port_text ? "MASTER_ADDR is"
                                   : "MASTER_ADDR / MASTER_PORT are") +
                      " not set; start the ranks with wick launch (or --nproc N)");
  if (port <= 0 || port > 65535)
    throw ConfigError(who + ": MASTER_PORT = '" + port_text +
                      "' is not a port; it must be in [1, 65535]");
  // Under torchrun the agent already serves a store at MASTER_PORT, shared by every restart
  // of the workers: join it, under a prefix of this attempt (as torch.distributed does).
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent && std::string(agent) == "True";
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(port);
  so.isServer = rank == 0 && !agent_store;
  so.numWorkers = static_cast<std::size_t>(world);
  so.waitWorkers = true;
  so.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    ExitOnStopScope stop_ends_the_wait;  // it lasts until every rank came, up to the timeout
    store = c10::make_intrusive<c10d::TCPStore>(addr, so);
  } catch (const std::exception& e) {
    // c10d's own words count its clients; what the user sets is the hook's timeout_s.
    const std::string what = e.what();
    if (what.find("imed out") == std::string::npos) throw;
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
    throw std::runtime_error(who + ": not every one of the " + std::to_string(world) +
                             " ranks reached the rendezvous at " + addr + ":" + port_text +
                             " within " + std::to_string(s) +
                             " s (timeout_s; c10d: " + what.substr(0, what.find('\n')) +
                             "); start every rank, or give them longer");
  }
  if (agent_store) {
    const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
    store = c10::make_intrusive<c10d::PrefixStore>(
        std::string("/worker/attempt_") + (attempt ? attempt : "0"), store);
  }
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

namespace {

// The address of this host's interface that packets to `host` leave from (the route's source),
// or "" when it cannot be found. A UDP connect sends nothing; it only picks the route. When
// `host` is this host (a loopback route): its first non-loopback IPv4 address.
std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || !found) return "";
  std::string out;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage mine{};
  socklen_t len = sizeof mine;
  char text[NI_MAXHOST];
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0 &&
      ::getnameinfo(reinterpret_cast<sockaddr*>(&mine), len, text, sizeof text, nullptr, 0,
                    NI_NUMERICHOST) == 0)
    out = text;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (out.rfind("127.", 0) != 0 && out != "::1") return out;
  // MASTER_ADDR is this host's own name, which Debian maps to 127.0.1.1: the other nodes
  // reach this host on its first interface that is up and not loopback.
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  out.clear();
  for (ifaddrs* i = all; i && out.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
        (i->ifa_flags & IFF_LOOPBACK))
      continue;
    if (::getnameinfo(i->ifa_addr, sizeof(sockaddr_in), text, sizeof text, nullptr, 0,
                      NI_NUMERICHOST) == 0)
      out = text;
  }
  ::freeifaddrs(all);
  return out;
}

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int world,
                                                      std::chrono::milliseconds timeout) {
  auto o = c10d::ProcessGroupGloo::Options::create(timeout);
  const std::string addr = std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "";
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (addr == "localhost" || addr.rfind("127.", 0) == 0)
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  // Not Gloo's default (this host's name, which Debian maps to 127.0.1.1, unreachable from
  // other nodes): the interface on the way to the master, which the other nodes reach too.
  else if (const auto here = local_address_towards(addr); !here.empty())
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(here));
  else
    o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  o->threads = 2;
  ExitOnStopScope stop_ends_the_wait;  // the group connects to every rank
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, o);
}

c10::intrusive_ptr<compat::CommBackend> nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                   int rank, int world,
                                                   std::chrono::milliseconds timeout,
                                                   const std::string& who) {
  if (const std::string why = cuda::load(); !why.empty())
    throw ConfigError(who + ": NCCL is in LibTorch's CUDA side, but " + why +
                      "; build wick against a CUDA LibTorch, or train on cpu (Gloo)");
  return cuda::nccl_group(store, rank, world, timeout);
}

}  // namespace wick
