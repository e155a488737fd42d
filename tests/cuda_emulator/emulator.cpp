// The emulator's workers, fibers, barriers and shuffles (emulator.hpp), and the CUDA runtime's
// calls the kernels' launch checks make (cuda/launch_check.hpp): nothing of CUDA's runtime runs.
#include "emulator.hpp"

#include <ucontext.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

// ThreadSanitizer's build (test_cuda_emulated_tsan).
#if defined(__SANITIZE_THREAD__)
#define WICK_EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WICK_EMU_TSAN 1
#endif
#endif

namespace wick_emu {

thread_local uint3 thread_idx, block_idx;
thread_local dim3 block_dim, grid_dim;

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

// A worker thread's blocks, one at a time: their CUDA threads are its fibers.
struct Blocks {
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;       // kept from block to block
  std::unique_ptr<char[]> stacks;  // kStack a fiber (not zeroed)
  ucontext_t scheduler;
  int current = 0;
  std::mt19937 schedule;  // the threads' order in each round
};
thread_local Blocks blocks;

// The launches' error for cudaGetLastError (the launching thread's).
cudaError_t last_error = cudaSuccess;

// A fiber's whole life. It ends in the scheduler's context: its fiber is made anew for the
// next block.
void fiber_main() {
  (*blocks.body)();
  blocks.fibers[blocks.current].state = State::returned;
  setcontext(&blocks.scheduler);
}

// Waits as `state` until the scheduler lets every thread waiting so go on.
void wait_as(State state) {
  Fiber& f = blocks.fibers[blocks.current];
  f.state = state;
  swapcontext(&f.context, &blocks.scheduler);
}

// Lets the threads waiting at a barrier every live thread of theirs has reached go on; false
// when none could.
bool release() {
  auto& fibers = blocks.fibers;
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
  auto& g = blocks;
  if (static_cast<int>(g.fibers.size()) < threads) {
    g.fibers.assign(threads, Fiber{});
    g.stacks.reset(new char[kStack * threads]);
  }
  for (int t = 0; t < threads; ++t) {
    Fiber& f = g.fibers[t];
    f.state = State::runnable;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = g.stacks.get() + kStack * t;
    f.context.uc_stack.ss_size = kStack;
    f.context.uc_link = nullptr;  // fiber_main never returns
    makecontext(&f.context, fiber_main, 0);
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

// One launch's share of a worker: blocks first, first + step, ... of the grid (x fastest).
struct Share {
  dim3 grid, block;
  const std::function<void()>* body;
  unsigned seed;
  unsigned long long first, step;
};

void run_share(const Share& s) {
  blocks.body = s.body;
  block_dim = s.block;
  grid_dim = s.grid;
  const unsigned long long n = 1ull * s.grid.x * s.grid.y * s.grid.z;
  for (unsigned long long b = s.first; b < n; b += s.step) {
    block_idx = {static_cast<unsigned>(b % s.grid.x),
                 static_cast<unsigned>(b / s.grid.x % s.grid.y),
                 static_cast<unsigned>(b / s.grid.x / s.grid.y)};
    blocks.schedule.seed(s.seed * 1000003u + static_cast<unsigned>(b));
    run_block(static_cast<int>(s.block.x));
  }
}

// The worker threads, kept from launch to launch. A worker's share is handed over under a
// lock of its own, and its end reported under another: nothing passes between two workers, so
// under ThreadSanitizer no block of one is ordered before a block of another in the same launch,
// and a location one writes and another touches is reported (a race on a GPU).
class Workers {
 public:
  // Under ThreadSanitizer every two blocks of a launch of up to kMax blocks run on two threads
  // (the tests' largest grid has 500); elsewhere a few threads, for speed and memory (a
  // fiber's stack each).
#ifdef WICK_EMU_TSAN
  static constexpr unsigned long long kMax = 512;
#else
  static constexpr unsigned long long kMax = 4;
#endif

  ~Workers() {
    for (auto& w : workers_) {
      {
        const std::lock_guard<std::mutex> lock(w->start_mutex);
        w->stop = true;
      }
      w->start.notify_one();
      w->thread.join();
    }
  }

  void run(dim3 grid, dim3 block, const std::function<void()>& body) {
    const unsigned long long n = 1ull * grid.x * grid.y * grid.z;
    const unsigned long long used = std::min(n, kMax);
    while (workers_.size() < used) {
      workers_.push_back(std::make_unique<Worker>());
      Worker* w = workers_.back().get();
      w->thread = std::thread([w] { w->loop(); });
    }
    ++launches_;
    for (unsigned long long i = 0; i < used; ++i) {
      Worker& w = *workers_[i];
      {
        const std::lock_guard<std::mutex> lock(w.start_mutex);
        w.share = Share{grid, block, &body, launches_, i, used};
        w.has_share = true;
      }
      w.start.notify_one();
    }
    for (unsigned long long i = 0; i < used; ++i) {
      Worker& w = *workers_[i];
      std::unique_lock<std::mutex> lock(w.done_mutex);
      w.done.wait(lock, [&] { return w.finished; });
      w.finished = false;
    }
  }

 private:
  struct Worker {
    std::thread thread;
    std::mutex start_mutex, done_mutex;
    std::condition_variable start, done;
    Share share{};
    bool has_share = false, stop = false, finished = false;

    void loop() {
      for (;;) {
        Share s;
        {
          std::unique_lock<std::mutex> lock(start_mutex);
          start.wait(lock, [&] { return has_share || stop; });
          if (stop) return;
          s = share;
          has_share = false;
        }
        run_share(s);
        {
          const std::lock_guard<std::mutex> lock(done_mutex);
          finished = true;
        }
        done.notify_one();
      }
    }
  };
  std::vector<std::unique_ptr<Worker>> workers_;
  unsigned launches_ = 0;  // seeds each block's order of threads
};

}  // namespace

void sync_threads() {
  wait_as(State::at_block_barrier);
}

void shuffle(unsigned mask, void* value, std::size_t size, int lane_mask) {
  auto& fibers = blocks.fibers;
  const int t = blocks.current, lane = t % 32, from = (t - lane) + (lane ^ lane_mask);
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
#ifdef WICK_EMU_TSAN
  static bool told = false;
  if (1ull * grid.x * grid.y * grid.z > Workers::kMax && !told) {
    told = true;
    std::fprintf(stderr,
                 "wick_emu: a grid of more than %llu blocks: blocks that many apart share a "
                 "thread, and races between them go unseen\n",
                 Workers::kMax);
  }
#endif
  // A launch's blocks are dealt to up to Workers::kMax threads that run together, each its
  // share one block after another: no block waits for another, as on a GPU.
  static Workers workers;
  workers.run(grid, block, body);
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
