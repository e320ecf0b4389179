// Epilogue: SwiGLU, H[m, j] = silu(G[m, j]) * U[m, j] in bf16, from an accumulator whose columns
// interleave gate and up (column 2j is gate j, column 2j+1 is up j: the weight rows interleaved).
// Each thread holds both halves of its pairs, so no data moves between threads; the H tile
// (TILE_M x TILE_N/2) is staged per warpgroup in 64-column chunks and stored with TMA.
#include PIPELINK_HEADER
#include <pipelink/fragment.h>
#include <cuda_bf16.h>

namespace self = pl_component;
using Acc = pl::frag::Sm90GmmaAcc;

__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

template <int TN>
__device__ __forceinline__ void swiglu_tile(const pl::Tile& tile, const float* acc, const pl::TensorMap* h) {
  const unsigned t = self::thread_rank(), wg = t / 128;
  unsigned char* chunk = self::smem_stage() + wg * 8192u;
  const int m0 = tile.coord[0] * self::TILE_M() + 64 * wg, j0 = tile.coord[1] * (TN / 2);
#pragma unroll
  for (int c = 0; c < TN / 128; ++c) {  // 64 output columns = 128 accumulator columns per chunk
    if (t % 128 == 0) pl::tma_store_wait_read();
    self::sync_stage();
#pragma unroll
    for (int j = 0; j < 32; ++j) {  // elements 64c + 2j (gate) and +1 (up)
      const int i = 64 * c + 2 * j;
      const unsigned row = Acc::row(i, t) - 64 * wg, col = Acc::col(i, t) / 2 - 64 * c;
      *reinterpret_cast<__nv_bfloat16*>(chunk + pl::swizzle128_offset(row, 2u * col)) =
          __float2bfloat16_rn(silu(acc[i]) * acc[i + 1]);
    }
    pl::fence_async_shared();
    self::sync_stage();
    if (t % 128 == 0) {
      pl::tma_store_2d(h, chunk, j0 + 64 * c, m0);
      pl::tma_store_commit();
    }
  }
  if (t % 128 == 0) pl::tma_store_wait_read();
}

extern "C" __device__ void epi_swiglu(pl::Tile tile, float* acc, const pl::TensorMap* h) {
  if (self::TILE_N() == 256) swiglu_tile<256>(tile, acc, h);
  else if (self::TILE_N() == 128) swiglu_tile<128>(tile, acc, h);
}
