// The classic build: what the four teams agreed on by hand when the layer was first assembled.
// No contracts: each team hard-codes its own constants and the values it assumed of the others.
#pragma once

namespace pl {
struct Tile {
  int coord[3];
  int linear;
  int stage;
  int iteration;
};
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(1024) unsigned char classic_dynamic_smem[];
  return classic_dynamic_smem;
}
__device__ __forceinline__ unsigned warp_index() { return threadIdx.x >> 5; }
__device__ __forceinline__ unsigned lane_index() { return threadIdx.x & 31; }
}  // namespace pl

// Every component runs on warps 0-3 of a 128-thread block, one task at a time, and may use the
// block's dynamic shared memory from offset 0: the integrator sized it for the largest component.
#define CLASSIC_THREADS_API                                                          \
  constexpr unsigned WARPS = 4;                                                      \
  constexpr unsigned THREADS = 128;                                                  \
  __device__ __forceinline__ unsigned warp_rank() { return pl::warp_index(); }       \
  __device__ __forceinline__ unsigned thread_rank() { return threadIdx.x; }
#define CLASSIC_SMEM(name, offset)                                                   \
  template <class T = unsigned char>                                                 \
  __device__ __forceinline__ T* smem_##name() {                                      \
    return reinterpret_cast<T*>(pl::dynamic_smem() + (offset));                      \
  }
