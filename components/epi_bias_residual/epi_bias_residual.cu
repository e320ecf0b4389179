// Epilogue: Y[m, n] = acc + bias[n] + R[m, n] in bf16 (a projection that adds its bias and the
// residual stream), stored with TMA. The residual is read straight from global memory in the
// accumulator's layout (two adjacent columns per load); the output is staged in 64x64 chunks
// (pl::tma_store_chunks).
#include PIPELINK_HEADER
#include <pipelink/fragment.h>
#include <cuda_bf16.h>

namespace self = pl_component;

template <int TM, int TN, int WG>
__device__ __forceinline__ void bias_residual_tile(const pl::Tile& tile, const float* acc, const pl::TensorMap* y,
                                                   const __nv_bfloat16* bias, const __nv_bfloat16* residual,
                                                   int M, int N) {
  using Acc = pl::frag::Sm90GmmaAcc<TM, TN, WG>;
  const unsigned t = self::thread_rank();
  const int m0 = tile.coord[0] * TM, n0 = tile.coord[1] * TN;
  auto fill = [&](int mb, int c, unsigned char* chunk) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int i = mb * Acc::kPerBlock + 32 * c + 2 * j;
      const int m = m0 + Acc::row(i, t), n = n0 + Acc::col(i, t);
      const bool in = m < M && n < N;
      const float2 r = in ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(residual + (long long)m * N + n))
                          : make_float2(0.f, 0.f);
      const float2 b = n < N ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + n)) : make_float2(0.f, 0.f);
      const unsigned row = Acc::row(i, t) % 64, cb = 2u * (Acc::col(i, t) - 64 * c);
      *reinterpret_cast<__nv_bfloat162*>(chunk + pl::swizzle128_offset(row, cb)) =
          __floats2bfloat162_rn(acc[i] + b.x + r.x, acc[i + 1] + b.y + r.y);
    }
  };
  pl::tma_store_chunks<Acc::kBlocks, WG, TN / 64>(y, self::smem_stage(), t, m0, n0, fill, [] { self::sync_stage(); });
}

extern "C" __device__ void epi_bias_residual(pl::Tile tile, float* acc, const pl::TensorMap* y,
                                             const __nv_bfloat16* __restrict__ bias,
                                             const __nv_bfloat16* __restrict__ residual, int M, int N) {
  const int tm = self::TILE_M(), tn = self::TILE_N(), wg = self::MMA_WARPGROUPS();
  if (tm == 128 && tn == 256 && wg == 2) bias_residual_tile<128, 256, 2>(tile, acc, y, bias, residual, M, N);
  else if (tm == 128 && tn == 128 && wg == 1) bias_residual_tile<128, 128, 1>(tile, acc, y, bias, residual, M, N);
  else if (tm == 64 && tn == 128 && wg == 1) bias_residual_tile<64, 128, 1>(tile, acc, y, bias, residual, M, N);
  else if (tm == 64 && tn == 256 && wg == 1) bias_residual_tile<64, 256, 1>(tile, acc, y, bias, residual, M, N);
  else if (tm == 128 && tn == 128 && wg == 2) bias_residual_tile<128, 128, 2>(tile, acc, y, bias, residual, M, N);
}
