// Epilogue: SwiGLU, H[m, j] = silu(G[m, j]) * U[m, j] in bf16, from an accumulator whose columns
// interleave gate and up (column 2j is gate j, column 2j+1 is up j: the weight rows interleaved).
// Each thread holds both halves of its pairs, so no data moves between threads; the H tile
// (TILE_M x TILE_N/2) is staged in 64x64 chunks and stored with TMA (pl::tma_store_chunks).
#include PIPELINK_HEADER
#include <pipelink/fragment.h>
#include <cuda_bf16.h>

namespace self = pl_component;

__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }

template <int TM, int TN, int WG>
__device__ __forceinline__ void swiglu_tile(const pl::Tile& tile, const float* acc, const pl::TensorMap* h) {
  using Acc = pl::frag::Sm90GmmaAcc<TM, TN, WG>;
  const unsigned t = self::thread_rank();
  auto fill = [&](int mb, int c, unsigned char* chunk) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {  // 64 output columns = 128 accumulator columns per chunk
      const int i = mb * Acc::kPerBlock + 64 * c + 2 * j;
      const unsigned row = Acc::row(i, t) % 64, col = Acc::col(i, t) / 2 - 64 * c;
      *reinterpret_cast<__nv_bfloat16*>(chunk + pl::swizzle128_offset(row, 2u * col)) =
          __float2bfloat16_rn(silu(acc[i]) * acc[i + 1]);
    }
  };
  pl::tma_store_chunks<Acc::kBlocks, WG, TN / 128>(h, self::smem_stage(), t, tile.coord[0] * TM,
                                                   tile.coord[1] * (TN / 2), fill, [] { self::sync_stage(); });
}

extern "C" __device__ void epi_swiglu(pl::Tile tile, float* acc, const pl::TensorMap* h) {
  const int tm = self::TILE_M(), tn = self::TILE_N(), wg = self::MMA_WARPGROUPS();
  if (tm == 128 && tn == 256 && wg == 2) swiglu_tile<128, 256, 2>(tile, acc, h);
  else if (tm == 128 && tn == 128 && wg == 1) swiglu_tile<128, 128, 1>(tile, acc, h);
  else if (tm == 64 && tn == 128 && wg == 1) swiglu_tile<64, 128, 1>(tile, acc, h);
  else if (tm == 64 && tn == 256 && wg == 1) swiglu_tile<64, 256, 1>(tile, acc, h);
  else if (tm == 128 && tn == 128 && wg == 2) swiglu_tile<128, 128, 2>(tile, acc, h);
}
