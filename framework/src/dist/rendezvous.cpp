#include "wick/rendezvous.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <string>

#include "wick/params.hpp"

namespace wick {

c10::intrusive_ptr<c10d::Store> rendezvous(int rank, int world, std::chrono::milliseconds timeout,
                                           const std::string& prefix, const std::string& who) {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port_text = std::getenv("MASTER_PORT");
  const long port = port_text ? std::atol(port_text) : 0;
  if (!addr || port <= 0 || port > 65535)
    throw ConfigError(who + ": WORLD_SIZE is " + std::to_string(world) +
                      " but MASTER_ADDR / MASTER_PORT are not set; start the ranks with wick "
                      "launch (or --nproc N)");
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
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(addr, so);
  if (agent_store) {
    const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
    store = c10::make_intrusive<c10d::PrefixStore>(
        std::string("/worker/attempt_") + (attempt ? attempt : "0"), store);
  }
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                      int rank, int world,
                                                      std::chrono::milliseconds timeout) {
  auto o = c10d::ProcessGroupGloo::Options::create(timeout);
  const std::string addr = std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "";
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (addr == "localhost" || addr.rfind("127.", 0) == 0)
    o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  o->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, o);
}

}  // namespace wick
