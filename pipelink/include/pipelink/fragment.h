// Register fragment layouts that pipelink knows by name (a port's `fragment`), so a producer and a
// consumer written by different teams agree on which accumulator element is where.
// Plain CUDA C++ with no standard-library includes.
#pragma once

namespace pl {
namespace frag {

// `sm90_gmma_acc`: the fp32 accumulator of SM90 wgmma (CuTe `partition_C` of a TiledMMA of
// 64xNx16 GMMA atoms with the warpgroups stacked along M). Warpgroup w of the role holds rows
// 64w..64w+63 of the tile; in it, thread t (warp q = t / 32, lane l = t % 32) holds N/2 elements:
//   element i -> row 16q + l/4 + 8*((i/2) % 2), column 8*(i/4) + 2*(l%4) + i%2.
struct Sm90GmmaAcc {
  static constexpr int kRowsPerWarpgroup = 64;
  __device__ __forceinline__ static int warpgroup(unsigned role_thread) { return role_thread / 128; }
  // Row within the tile of element i held by `role_thread` (the thread's index in the role).
  __device__ __forceinline__ static int row(int i, unsigned role_thread) {
    const unsigned t = role_thread % 128;
    return 64 * (role_thread / 128) + 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
  }
  // Column within the tile of element i.
  __device__ __forceinline__ static int col(int i, unsigned role_thread) {
    return 8 * (i / 4) + 2 * (role_thread % 4) + i % 2;
  }
};

}  // namespace frag

// Byte offset of element (row, byte column `cb`) in a tile of 128-byte rows stored with the TMA's
// 128B swizzle (16-byte chunk index XOR row % 8); the tile must start 1024-byte aligned.
__device__ __forceinline__ unsigned swizzle128_offset(unsigned row, unsigned cb) {
  return row * 128u + ((((cb >> 4) ^ (row & 7u)) << 4) | (cb & 15u));
}

// Async-proxy helpers for TMA stores from shared memory.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

__device__ __forceinline__ void tma_store_2d(const void* map, const void* smem, int c0, int c1) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(map), "r"(s), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until the shared memory of every committed store has been read (the buffer may be reused).
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

}  // namespace pl
