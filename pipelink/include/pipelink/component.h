// pipelink component support: what every component may use, whatever its contract.
// Plain CUDA C++ with no standard-library includes, so NVRTC compiles it too.
#pragma once

namespace pl {

// The tile a per-tile entry is called for. `coord` follows the contract's tile_sequence grid;
// `stage` is the ring slot of the component's multi-stage ports for this tile.
struct Tile {
  int coord[3];
  int linear;     // position in the component's tile sequence
  int stage;      // ring slot (0 when the ports have one stage)
  int iteration;  // how many tiles (or tile pieces) this CTA has walked before this one
  // A contract with a tile_sequence.reduction: this call covers the tile's reduction blocks
  // [k_begin, k_end), and the CTA walked k_first blocks before them (a stage ring's position).
  int k_begin = 0;
  int k_end = 0;
  int k_first = 0;
  // 1 when the CTA's previous task was of the same call (same layer) and no other task ran on the CTA
  // since, so the component's scratch buffers still hold what that task left there (an operand every task
  // of the call reads, staged once per CTA). Set by persistent schedules and by a sequential kernel of one
  // component; 0 everywhere else.
  int continues = 0;
};

// The block's dynamic shared memory. Every component sees the same base; the linker hands out
// offsets inside it, so components never declare __shared__ arrays of their own.
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(1024) unsigned char pl_dynamic_smem[];
  return pl_dynamic_smem;
}

// Named barriers: `id` comes from the linker (a link-time constant), `threads` from the contract.
__device__ __forceinline__ void barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void barrier_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ unsigned warp_index() { return threadIdx.x >> 5; }
__device__ __forceinline__ unsigned lane_index() { return threadIdx.x & 31; }

}  // namespace pl

namespace pl {

// A TMA descriptor (the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned), encoded by the
// launcher from the user's tensor and passed as a __grid_constant__ kernel parameter; the glue
// hands components its address. Declared here so that code compiled by NVRTC needs no <cuda.h>.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

}  // namespace pl
