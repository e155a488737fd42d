// A CPU emulator for wick's CUDA kernels (test_cuda_emulated): a kernel source, its launches
// rewritten by rewrite_launches.py, is compiled as C++ after this header. A launch's blocks
// run on threads of their own, started together (under ThreadSanitizer, test_cuda_emulated_tsan,
// a location two blocks of one launch touch, one of them writing, is reported: a race on a
// GPU). A block's CUDA threads are fibers of its thread (ucontext), each run until it waits at
// a barrier or returns; __syncthreads and the warp shuffles are barriers of the threads that
// have not returned. Memory is the host's: a kernel's pointers are the test's vectors. Only
// what wick's kernels use is emulated: one-dimensional blocks, __shfl_xor_sync over whole
// warps, __shared__ arrays.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>

// CUDA's qualifiers, for the host compiler. A block's __shared__ array is a static of its
// thread: a thread runs its blocks one at a time, so each finds it as its own.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __launch_bounds__(...)

namespace wick_emu {

// The running thread's place, as CUDA's built-in variables give it.
extern thread_local uint3 thread_idx, block_idx;
extern thread_local dim3 block_dim, grid_dim;

void sync_threads();
// Exchanges `size` bytes at value with the lane lane ^ lane_mask of the calling thread's warp.
void shuffle(unsigned mask, void* value, std::size_t size, int lane_mask);
// Runs body in every thread of every block of the grid; a configuration CUDA refuses is left
// as the error cudaGetLastError returns, and nothing runs.
void run_grid(dim3 grid, dim3 block, std::size_t shared, const std::function<void()>& body);

template <class... Params, class... Args>
void launch(dim3 grid, dim3 block, std::size_t shared, cudaStream_t, void (*kernel)(Params...),
            const Args&... args) {
  // The arguments are converted to the kernel's parameters once, as a launch copies them.
  const std::tuple<std::decay_t<Params>...> params(args...);
  run_grid(grid, block, shared, [&] { std::apply(kernel, params); });
}

}  // namespace wick_emu

#define threadIdx (::wick_emu::thread_idx)
#define blockIdx (::wick_emu::block_idx)
#define blockDim (::wick_emu::block_dim)
#define gridDim (::wick_emu::grid_dim)

inline void __syncthreads() {
  ::wick_emu::sync_threads();
}

// A 16-byte store (CUDA's says so in one instruction; here, a store).
inline void __stwb(uint4* p, uint4 v) {
  *p = v;
}

template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable_v<T>);
  ::wick_emu::shuffle(mask, &v, sizeof v, lane_mask);
  return v;
}
