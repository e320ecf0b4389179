// Epilogue: the fp32 accumulator tile, rounded to bf16, stored with TMA (D[M, N] row-major).
// Runs on the warps of the role whose accumulator it receives (one or two warpgroups), staging
// 64x64 chunks in shared memory (pl::tma_store_chunks).
#include PIPELINK_HEADER
#include <pipelink/fragment.h>
#include <cuda_bf16.h>

namespace self = pl_component;

template <int TM, int TN, int WG>
__device__ __forceinline__ void store_tile(const pl::Tile& tile, const float* acc, const pl::TensorMap* d) {
  using Acc = pl::frag::Sm90GmmaAcc<TM, TN, WG>;
  const unsigned t = self::thread_rank();
  auto fill = [&](int mb, int c, unsigned char* chunk) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // elements i, i+1: one row, two adjacent columns of chunk c
      const int i = mb * Acc::kPerBlock + 32 * c + 2 * j;
      const unsigned row = Acc::row(i, t) % 64, cb = 2u * (Acc::col(i, t) - 64 * c);
      *reinterpret_cast<__nv_bfloat162*>(chunk + pl::swizzle128_offset(row, cb)) =
          __floats2bfloat162_rn(acc[i], acc[i + 1]);
    }
  };
  pl::tma_store_chunks<Acc::kBlocks, WG, TN / 64>(d, self::smem_stage(), t, tile.coord[0] * TM, tile.coord[1] * TN,
                                                  fill, [] { self::sync_stage(); });
}

extern "C" __device__ void epi_store_bf16(pl::Tile tile, float* acc, const pl::TensorMap* d) {
  // Tile shape and warpgroups are link-time constants: LTO keeps only the matching instance.
  const int tm = self::TILE_M(), tn = self::TILE_N(), wg = self::MMA_WARPGROUPS();
  if (tm == 128 && tn == 256 && wg == 2) store_tile<128, 256, 2>(tile, acc, d);
  else if (tm == 128 && tn == 128 && wg == 1) store_tile<128, 128, 1>(tile, acc, d);
  else if (tm == 64 && tn == 128 && wg == 1) store_tile<64, 128, 1>(tile, acc, d);
  else if (tm == 64 && tn == 256 && wg == 1) store_tile<64, 256, 1>(tile, acc, d);
  else if (tm == 128 && tn == 128 && wg == 2) store_tile<128, 128, 2>(tile, acc, d);
}
