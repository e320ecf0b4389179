// Epilogue: the fp32 accumulator tile, rounded to bf16, stored with TMA (D[M, N] row-major).
// Runs on the warps of the role whose accumulator it receives; each warpgroup stages its 64 rows
// in 64-column chunks (8 KB, 128B swizzle) and one of its threads issues the bulk store.
#include PIPELINK_HEADER
#include <pipelink/fragment.h>
#include <cuda_bf16.h>

namespace self = pl_component;
using Acc = pl::frag::Sm90GmmaAcc;

template <int TN>
__device__ __forceinline__ void store_tile(const pl::Tile& tile, const float* acc, const pl::TensorMap* d) {
  const unsigned t = self::thread_rank(), lane = t % 32, wg = t / 128;
  unsigned char* chunk = self::smem_stage() + wg * 8192u;
  const int m0 = tile.coord[0] * self::TILE_M() + 64 * wg, n0 = tile.coord[1] * TN;
#pragma unroll
  for (int c = 0; c < TN / 64; ++c) {
    if (t % 128 == 0) pl::tma_store_wait_read();  // the previous chunk has left the buffer
    self::sync_stage();
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // elements 32c + 2j, +1: one row, two adjacent columns
      const int i = 32 * c + 2 * j;
      const unsigned row = Acc::row(i, t) - 64 * wg, cb = 2u * (Acc::col(i, t) - 64 * c);
      const __nv_bfloat162 v = __floats2bfloat162_rn(acc[i], acc[i + 1]);
      *reinterpret_cast<__nv_bfloat162*>(chunk + pl::swizzle128_offset(row, cb)) = v;
    }
    (void)lane;
    pl::fence_async_shared();
    self::sync_stage();
    if (t % 128 == 0) {
      pl::tma_store_2d(d, chunk, n0 + 64 * c, m0);
      pl::tma_store_commit();
    }
  }
  if (t % 128 == 0) pl::tma_store_wait_read();
}

extern "C" __device__ void epi_store_bf16(pl::Tile tile, float* acc, const pl::TensorMap* d) {
  // The tile width is a link-time constant: LTO keeps only the matching instance.
  if (self::TILE_N() == 256) store_tile<256>(tile, acc, d);
  else if (self::TILE_N() == 128) store_tile<128>(tile, acc, d);
  else if (self::TILE_N() == 64) store_tile<64>(tile, acc, d);
}
