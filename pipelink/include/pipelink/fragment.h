// Register fragment layouts that pipelink knows by name (a port's `fragment`), so a producer and a
// consumer written by different teams agree on which accumulator element is where.
// Plain CUDA C++ with no standard-library includes.
#pragma once

namespace pl {
namespace frag {

// `sm90_gmma_acc`: the fp32 accumulator of SM90 wgmma, as CuTe's `partition_C` lays it out for a
// TiledMMA of 64xNx16 GMMA atoms with WG warpgroups stacked along M, over a TM x TN tile. Each thread
// of the role holds TM*TN/(128*WG) elements: element i = mb*(TN/2) + v is in M-block mb (of
// TM/(64*WG)); warpgroup w, warp q = (t%128)/32, lane l = t%32 of the role's thread t hold
//   row 64*WG*mb + 64w + 16q + l/4 + 8*((v/2) % 2),   column 8*(v/4) + 2*(l%4) + v%2.
// (One warpgroup over 64 rows, or two over 128 rows: one M-block; one warpgroup over 128 rows: two.)
template <int TM, int TN, int WG>
struct Sm90GmmaAcc {
  static constexpr int kElements = TM * TN / (128 * WG);  // per thread
  static constexpr int kPerBlock = TN / 2;                // elements per M-block
  static constexpr int kBlocks = TM / (64 * WG);          // M-blocks
  static_assert(kBlocks >= 1 && kBlocks * 64 * WG == TM, "TM must be a multiple of 64 warpgroups' rows");
  // Row within the tile of element i held by `role_thread` (the thread's index in the role).
  __device__ __forceinline__ static int row(int i, unsigned role_thread) {
    const unsigned t = role_thread % 128;
    const int v = i % kPerBlock, mb = i / kPerBlock;
    return 64 * WG * mb + 64 * (role_thread / 128) + 16 * (t / 32) + (t % 32) / 4 + 8 * ((v / 2) % 2);
  }
  // Column within the tile of element i.
  __device__ __forceinline__ static int col(int i, unsigned role_thread) {
    const int v = i % kPerBlock;
    return 8 * (v / 4) + 2 * (role_thread % 4) + v % 2;
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
// Wait until at most one committed store still reads shared memory (double-buffered staging).
__device__ __forceinline__ void tma_store_wait_read_but_one() {
  asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
}

// Stores an output tile from registers through shared memory with the TMA, the way an epilogue
// after a wgmma mainloop does: for each 64-row slab a warpgroup holds (M-block mb) and each of the
// tile's CHUNKS 64-column chunks c, `fill(mb, c, chunk)` writes a 64x64 2-byte chunk (rows of 128
// bytes, 128B-swizzled: swizzle128_offset) and one thread of the warpgroup stores it at
// (col0 + 64c, row0 + 64*WG*mb + 64*warpgroup). Each warpgroup alternates between two 8 KB staging
// chunks (`staging` holds 16 KB per warpgroup, 1024-byte aligned), so filling one overlaps the
// store of the other. `sync()` is a barrier over the role's threads. On return the staging is free.
template <int BLOCKS, int WG, int CHUNKS, class Fill, class Sync>
__device__ __forceinline__ void tma_store_chunks(const void* map, unsigned char* staging, unsigned role_thread, int row0,
                                                 int col0, Fill fill, Sync sync) {
  const unsigned wg = role_thread / 128;
  const bool issuer = role_thread % 128 == 0;
  unsigned char* mine = staging + wg * 16384u;
#pragma unroll
  for (int mb = 0; mb < BLOCKS; ++mb) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      unsigned char* chunk = mine + ((mb * CHUNKS + c) % 2) * 8192u;
      if (issuer) tma_store_wait_read_but_one();  // this buffer's previous store has read it
      sync();
      fill(mb, c, chunk);
      fence_async_shared();  // the chunk's generic-proxy writes, visible to the TMA
      sync();
      if (issuer) {
        tma_store_2d(map, chunk, col0 + 64 * c, row0 + 64 * WG * mb + 64 * static_cast<int>(wg));
        tma_store_commit();
      }
    }
  }
  if (issuer) tma_store_wait_read();
}

}  // namespace pl
