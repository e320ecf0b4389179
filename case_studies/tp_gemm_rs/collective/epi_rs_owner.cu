// epi_rs_owner: a tensor-parallel GEMM's reduce-scatter as the GEMM's epilogue. Every rank holds a K slice of
// X and W and computes every output tile's partial; rank r owns the rows [r * OWN, (r + 1) * OWN) of Y,
// OWN = M / WORLD (a whole number of tiles: the caller's M is a multiple of WORLD * TILE_M).
//  - a tile this rank does not own: its partial, rounded to bf16, goes straight into the owner's slot
//    parts[me] (NVLink stores through nvshmem_ptr, staged in shared memory so they go out as whole 128-byte
//    rows); after the epilogue's barrier and a system-scope fence one thread signals the owner's
//    flags[tile] (nvshmemx_signal_op);
//  - an owned tile: one thread waits until flags[tile] holds every other rank's signal of this launch
//    (WORLD - 1 a launch; `epoch` counts launches from 1, so the flags never need clearing), then
//    y = acc + the other ranks' partials, rounded once, stored with TMA into this rank's [OWN, N] slice.
//    With spin_bound > 0 (a debug run) the wait gives up after that many polls, leaves the tile unstored and
//    reports (tile + 1, signals wanted, signals seen) in report[0..2], the first tile to give up only.
// Every rank walks the tiles in the same order (the mainloop's static grouped order, the same grid), and
// only the owner of a tile waits at it: the earliest tile any rank waits at is one every other rank reaches
// without waiting, so no wait can close a cycle.
#include PIPELINK_HEADER
#include <pipelink/fragment.h>
#include <cuda_bf16.h>
#include <nvshmem.h>
#include <nvshmemx.h>

namespace self = pl_component;

namespace {

__device__ __forceinline__ unsigned long long load_acquire_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The tile's bf16 chunks to global memory at dst (leading dimension ld) by plain 16-byte stores: chunk (mb, c)
// of warpgroup wg, 64 rows x 64 columns at (row0 + 64*WG*mb + 64*wg, col0 + 64c), is filled into this
// warpgroup's staging (128B-swizzled, as for a TMA store), then its 128 threads copy it out a 16-byte
// segment each, four times: 8 threads a 128-byte row. Rows at or past `rows` and columns past `cols` are
// not stored (cols a multiple of 8). `sync()`: a barrier over the role's threads.
template <int BLOCKS, int WG, int CHUNKS, class Fill, class Sync>
__device__ __forceinline__ void copy_chunks(__nv_bfloat16* dst, int ld, int row0, int col0, int rows, int cols,
                                            unsigned char* staging, unsigned role_thread, Fill fill, Sync sync) {
  const unsigned wg = role_thread / 128, lt = role_thread % 128;
  unsigned char* chunk = staging + wg * 16384u;
#pragma unroll
  for (int mb = 0; mb < BLOCKS; ++mb) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      sync();  // the chunk's last copy-out has read it
      fill(mb, c, chunk);
      sync();  // the whole chunk is in
      const int r0 = row0 + 64 * WG * mb + 64 * static_cast<int>(wg), c0 = col0 + 64 * c;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const unsigned v = lt + 128u * k, row = v / 8, seg = v % 8;
        const int m = r0 + static_cast<int>(row), n = c0 + 8 * static_cast<int>(seg);
        const uint4 val = *reinterpret_cast<const uint4*>(chunk + pl::swizzle128_offset(row, 16u * seg));
        if (m < rows && n + 8 <= cols) *reinterpret_cast<uint4*>(dst + (long long)m * ld + n) = val;
      }
    }
  }
}

template <int TM, int TN, int WG>
__device__ __forceinline__ void rs_tile(const pl::Tile& tile, const float* acc, const pl::TensorMap* y,
                                        __nv_bfloat16* parts, unsigned long long* flags, long long epoch,
                                        long long spin_bound, unsigned long long* report, int M, int N) {
  using Acc = pl::frag::Sm90GmmaAcc<TM, TN, WG>;
  const unsigned t = self::thread_rank();
  const int world = nvshmem_n_pes(), me = nvshmem_my_pe();
  const int own = M / world;                       // rows each rank owns
  const int m0 = tile.coord[0] * TM, n0 = tile.coord[1] * TN;
  const int owner = m0 / own;
  const long long slot = (long long)own * N;       // one rank's partials of the owner's rows
  const long long flag = (long long)tile.coord[0] * ((N + TN - 1) / TN) + tile.coord[1];
  if (owner != me) {
    __nv_bfloat16* peer = static_cast<__nv_bfloat16*>(nvshmem_ptr(parts, owner));
    if (peer == nullptr) __trap();  // the owner's memory is not reachable by loads and stores (no NVLink/P2P)
    // The partial goes out in 64x64 chunks staged in shared memory, then as whole 128-byte rows of 16-byte
    // stores: NVLink carries full lines, not the accumulator layout's scattered 4-byte pairs.
    auto fill = [&](int mb, int c, unsigned char* chunk) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int i = mb * Acc::kPerBlock + 32 * c + 2 * j;
        const unsigned row = Acc::row(i, t) % 64, cb = 2u * (Acc::col(i, t) - 64 * c);
        *reinterpret_cast<__nv_bfloat162*>(chunk + pl::swizzle128_offset(row, cb)) =
            __floats2bfloat162_rn(acc[i], acc[i + 1]);
      }
    };
    copy_chunks<Acc::kBlocks, WG, TN / 64>(peer + me * slot, N, m0 - owner * own, n0, own, N, self::smem_stage(), t,
                                           fill, [] { self::sync_stage(); });
    self::sync_stage();  // every thread's stores are issued before the one fence that releases them
    if (t == 0) {
      __threadfence_system();
      nvshmemx_signal_op(reinterpret_cast<uint64_t*>(flags + flag), 1ull, NVSHMEM_SIGNAL_ADD, owner);
    }
    return;
  }
  // The waiting thread's verdict, for the whole role, in the first word of the staging buffer: thread 0 is
  // the TMA issuer of warpgroup 0, whose last tile's stores have finished reading the buffer (tma_store_chunks
  // waits for them before it returns), and the chunks are filled only after the barrier inside
  // tma_store_chunks that every thread reaches after reading the verdict.
  volatile int* const verdict = reinterpret_cast<volatile int*>(self::smem_stage());
  if (t == 0) {
    const unsigned long long want = (unsigned long long)epoch * (unsigned long long)(world - 1);
    unsigned long long seen = load_acquire_sys(flags + flag), spins = 0;
    while (seen < want && (spin_bound <= 0 || ++spins < (unsigned long long)spin_bound)) seen = load_acquire_sys(flags + flag);
    *verdict = seen < want;
    // A debug run bounds the wait: the first tile that gives up says which, what it waited for and saw
    if (seen < want && atomicCAS(report, 0ull, (unsigned long long)flag + 1ull) == 0ull) {
      report[1] = want;
      report[2] = seen;
      __threadfence_system();
    }
  }
  self::sync_stage();  // the other ranks' partials are in before anyone reads them
  if (*verdict) {
    self::sync_stage();  // every thread has read the verdict before the next tile may overwrite it
    return;              // nothing stored: the caller reads the report
  }
  auto fill = [&](int mb, int c, unsigned char* chunk) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int i = mb * Acc::kPerBlock + 32 * c + 2 * j;
      const int m = m0 + Acc::row(i, t), n = n0 + Acc::col(i, t);
      float2 sum = make_float2(acc[i], acc[i + 1]);
      if (m < M && n < N) {
        const __nv_bfloat16* src = parts + (long long)(m - me * own) * N + n;
        for (int r = 0; r < world; ++r) {
          if (r == me) continue;
          // written by other GPUs over NVLink in this launch: volatile loads, never a cached copy
          const unsigned bits = __ldcv(reinterpret_cast<const unsigned*>(src + r * slot));
          const float2 p = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
          sum.x += p.x;
          sum.y += p.y;
        }
      }
      const unsigned row = Acc::row(i, t) % 64, cb = 2u * (Acc::col(i, t) - 64 * c);
      *reinterpret_cast<__nv_bfloat162*>(chunk + pl::swizzle128_offset(row, cb)) = __floats2bfloat162_rn(sum.x, sum.y);
    }
  };
  pl::tma_store_chunks<Acc::kBlocks, WG, TN / 64>(y, self::smem_stage(), t, m0 - me * own, n0, fill,
                                                  [] { self::sync_stage(); });
}

}  // namespace

extern "C" __device__ void epi_rs_owner(pl::Tile tile, float* acc, const pl::TensorMap* y,
                                        __nv_bfloat16* __restrict__ parts, unsigned long long* __restrict__ flags,
                                        long long epoch, long long spin_bound, unsigned long long* report, int M,
                                        int N) {
  const int tm = self::TILE_M(), tn = self::TILE_N(), wg = self::MMA_WARPGROUPS();
  if (tm == 128 && tn == 256 && wg == 2) rs_tile<128, 256, 2>(tile, acc, y, parts, flags, epoch, spin_bound, report, M, N);
  else if (tm == 128 && tn == 128 && wg == 1) rs_tile<128, 128, 1>(tile, acc, y, parts, flags, epoch, spin_bound, report, M, N);
  else if (tm == 64 && tn == 128 && wg == 1) rs_tile<64, 128, 1>(tile, acc, y, parts, flags, epoch, spin_bound, report, M, N);
}
