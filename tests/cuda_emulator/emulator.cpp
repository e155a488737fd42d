// The emulator's fibers, barriers and shuffles (emulator.hpp), and the CUDA runtime's calls
// the kernels' launch checks make (cuda/launch_check.hpp): nothing of CUDA's runtime runs.
#include "emulator.hpp"

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace wick_emu {

uint3 thread_idx, block_idx;
dim3 block_dim, grid_dim;

namespace {

// What a GPU would do wrong or hang on: the test stops here, saying where.
[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "wick_emu: %s (block %u, thread %u)\n", what.c_str(), block_idx.x,
               thread_idx.x);
  std::abort();
}

enum class State { runnable, at_block_barrier, at_warp_barrier, returned };

struct Fiber {
  ucontext_t context;
  State state = State::runnable;
  unsigned char slot[16];  // the value it offers at a shuffle
};

constexpr std::size_t kStack = 256 * 1024;  // a fiber's stack (a sanitizer's frames are large)

struct Grid {
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<std::vector<char>> stacks;  // kept from launch to launch
  ucontext_t scheduler;
  int current = 0;
  std::mt19937 schedule{1};  // the threads' order in each round
} grid_state;

// The launches' error for cudaGetLastError.
cudaError_t last_error = cudaSuccess;

void fiber_main() {
  (*grid_state.body)();
  grid_state.fibers[grid_state.current].state = State::returned;
  // uc_link returns to the scheduler.
}

// Waits as `state` until the scheduler lets every thread waiting so go on.
void wait_as(State state) {
  Fiber& f = grid_state.fibers[grid_state.current];
  f.state = state;
  swapcontext(&f.context, &grid_state.scheduler);
}

// Lets the threads waiting at a barrier every live thread of theirs has reached go on; false
// when none could.
bool release() {
  auto& fibers = grid_state.fibers;
  const int n = static_cast<int>(fibers.size());
  bool all_at_block = true, any_live = false, released = false;
  for (int w = 0; w < n; w += 32) {
    bool all_at_warp = true, any = false;
    for (int t = w; t < n && t < w + 32; ++t) {
      if (fibers[t].state == State::returned) continue;
      any = any_live = true;
      all_at_warp = all_at_warp && fibers[t].state == State::at_warp_barrier;
      all_at_block = all_at_block && fibers[t].state == State::at_block_barrier;
    }
    if (any && all_at_warp) {
      for (int t = w; t < n && t < w + 32; ++t)
        if (fibers[t].state == State::at_warp_barrier) fibers[t].state = State::runnable;
      released = true;
    }
  }
  if (any_live && all_at_block) {
    for (auto& f : fibers)
      if (f.state == State::at_block_barrier) f.state = State::runnable;
    released = true;
  }
  return released;
}

bool refused(dim3 grid, dim3 block, std::size_t shared) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  return threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
         grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 ||
         shared > 48 * 1024;
}

void run_block(int threads) {
  auto& g = grid_state;
  g.fibers.assign(threads, Fiber{});
  while (g.stacks.size() < static_cast<std::size_t>(threads)) g.stacks.emplace_back(kStack);
  for (int t = 0; t < threads; ++t) {
    ucontext_t& c = g.fibers[t].context;
    getcontext(&c);
    c.uc_stack.ss_sp = g.stacks[t].data();
    c.uc_stack.ss_size = kStack;
    c.uc_link = &g.scheduler;
    makecontext(&c, fiber_main, 0);
  }
  // Round after round: each runnable thread runs until it waits or returns, in an order drawn
  // afresh each round (so that a race within the block, a result that rides on the order its
  // threads run in, shows as a wrong one); then the barriers every live thread has reached
  // open.
  std::vector<int> order(threads);
  std::iota(order.begin(), order.end(), 0);
  for (;;) {
    bool ran = false;
    std::shuffle(order.begin(), order.end(), g.schedule);
    for (const int t : order) {
      if (g.fibers[t].state != State::runnable) continue;
      g.current = t;
      thread_idx = {static_cast<unsigned>(t), 0, 0};
      swapcontext(&g.scheduler, &g.fibers[t].context);
      ran = true;
    }
    if (release()) continue;
    if (!ran) break;
  }
  for (int t = 0; t < threads; ++t)
    if (g.fibers[t].state != State::returned) {
      thread_idx = {static_cast<unsigned>(t), 0, 0};
      fail("threads waiting at barriers that not every live thread of theirs reaches");
    }
}

}  // namespace

void sync_threads() {
  wait_as(State::at_block_barrier);
}

void shuffle(unsigned mask, void* value, std::size_t size, int lane_mask) {
  auto& fibers = grid_state.fibers;
  const int t = grid_state.current, lane = t % 32, from = (t - lane) + (lane ^ lane_mask);
  if (mask != ~0u) fail("a shuffle of part of a warp (not emulated)");
  std::memcpy(fibers[t].slot, value, size);
  wait_as(State::at_warp_barrier);
  // Every lane of the mask takes part: one that has returned has nothing to give.
  if ((lane ^ lane_mask) >= 32 || from >= static_cast<int>(fibers.size()) ||
      fibers[from].state == State::returned)
    fail("a shuffle from a lane that returned or does not exist");
  unsigned char got[16];
  std::memcpy(got, fibers[from].slot, size);
  wait_as(State::at_warp_barrier);  // before any lane offers its next value
  std::memcpy(value, got, size);
}

void run_grid(dim3 grid, dim3 block, std::size_t shared, const std::function<void()>& body) {
  if (refused(grid, block, shared)) {
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  if (block.y != 1 || block.z != 1) fail("a block of more than one dimension (not emulated)");
  grid_state.body = &body;
  block_dim = block;
  grid_dim = grid;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        block_idx = {x, y, z};
        run_block(static_cast<int>(block.x));
      }
}

}  // namespace wick_emu

extern "C" cudaError_t cudaGetLastError() {
  const cudaError_t e = wick_emu::last_error;
  wick_emu::last_error = cudaSuccess;
  return e;
}

extern "C" const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "a launch configuration CUDA refuses (emulated)";
}
