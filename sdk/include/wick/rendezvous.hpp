// How the ranks that `wick launch` (or torchrun) started find each other: a TCPStore at
// MASTER_ADDR:MASTER_PORT (rank 0 serves it) and a Gloo (or NCCL) process group over it. Used by
// the ddp hook for a fit and by wick itself for evaluate / predict. Callers include c10d's own
// headers (ProcessGroupGloo.hpp needs USE_C10D_GLOO) to use the results.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>

#include "wick/torch_compat.hpp"  // compat::CommBackend
#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace c10d {
class Store;
class ProcessGroupGloo;
}  // namespace c10d

namespace wick {

// The store of ranks 0 .. world-1, its keys under `prefix`; returns once all have joined.
// Throws ConfigError naming `who` when MASTER_ADDR / MASTER_PORT are not set. Sets SIGPIPE
// to be ignored (unless the program handles it): a write to a dead peer's socket is then an
// error the collective reports, not the silent end of this process.
WICK_EXPORT c10::intrusive_ptr<c10d::Store> rendezvous(int rank, int world,
                                                       std::chrono::milliseconds timeout,
                                                       const std::string& prefix,
                                                       const std::string& who);

// A Gloo group over the store: bound to GLOO_SOCKET_IFNAME when set, to 127.0.0.1 when
// MASTER_ADDR is a loopback address, else to the address of the interface that leads to
// MASTER_ADDR.
WICK_EXPORT c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
    std::chrono::milliseconds timeout);

// Since SDK 2.10: an NCCL group over the store, between the ranks' current CUDA devices. NCCL
// is in LibTorch's CUDA side, which wick loads for a run that asks for CUDA: a plugin that
// calls this needs not link it (nor pays for it on the CPU). Throws ConfigError naming `who`
// when this wick has no CUDA side (a CPU-only LibTorch) or it did not load.
WICK_EXPORT c10::intrusive_ptr<compat::CommBackend> nccl_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
    std::chrono::milliseconds timeout, const std::string& who);

}  // namespace wick

WICK_PUBLIC_END
