// Epilogue: Y[m, n] = acc + bias[n] + R[m, n] in bf16 (a projection that adds its bias and the
// residual stream), stored with TMA. The residual is read straight from global memory in the
// accumulator's layout (two adjacent columns per load); the output is staged per warpgroup in
// 64-column chunks (8 KB, 128B swizzle).
#include PIPELINK_HEADER
#include <pipelink/fragment.h>
#include <cuda_bf16.h>

namespace self = pl_component;
using Acc = pl::frag::Sm90GmmaAcc;

template <int TN>
__device__ __forceinline__ void bias_residual_tile(const pl::Tile& tile, const float* acc, const pl::TensorMap* y,
                                                   const __nv_bfloat16* bias, const __nv_bfloat16* residual,
                                                   int M, int N) {
  const unsigned t = self::thread_rank(), wg = t / 128;
  unsigned char* chunk = self::smem_stage() + wg * 8192u;
  const int tm0 = tile.coord[0] * self::TILE_M(), m0 = tm0 + 64 * wg, n0 = tile.coord[1] * TN;
#pragma unroll
  for (int c = 0; c < TN / 64; ++c) {
    // Read this chunk's residual and bias before the barrier: the loads overlap the wait.
    __nv_bfloat162 r[16], b[8];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int i = 32 * c + 2 * j, m = tm0 + Acc::row(i, t), n = n0 + Acc::col(i, t);
      r[j] = (m < M && n < N) ? *reinterpret_cast<const __nv_bfloat162*>(residual + (long long)m * N + n)
                              : __floats2bfloat162_rn(0.f, 0.f);
      if (j % 2 == 0) b[j / 2] = n < N ? *reinterpret_cast<const __nv_bfloat162*>(bias + n) : __floats2bfloat162_rn(0.f, 0.f);
    }
    if (t % 128 == 0) pl::tma_store_wait_read();
    self::sync_stage();
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int i = 32 * c + 2 * j;
      const unsigned row = Acc::row(i, t) - 64 * wg, cb = 2u * (Acc::col(i, t) - 64 * c);
      const float2 rf = __bfloat1622float2(r[j]), bf = __bfloat1622float2(b[j / 2]);
      *reinterpret_cast<__nv_bfloat162*>(chunk + pl::swizzle128_offset(row, cb)) =
          __floats2bfloat162_rn(acc[i] + bf.x + rf.x, acc[i + 1] + bf.y + rf.y);
    }
    pl::fence_async_shared();
    self::sync_stage();
    if (t % 128 == 0) {
      pl::tma_store_2d(y, chunk, n0 + 64 * c, m0);
      pl::tma_store_commit();
    }
  }
  if (t % 128 == 0) pl::tma_store_wait_read();
}

extern "C" __device__ void epi_bias_residual(pl::Tile tile, float* acc, const pl::TensorMap* y,
                                             const __nv_bfloat16* __restrict__ bias,
                                             const __nv_bfloat16* __restrict__ residual, int M, int N) {
  if (self::TILE_N() == 256) bias_residual_tile<256>(tile, acc, y, bias, residual, M, N);
  else if (self::TILE_N() == 128) bias_residual_tile<128>(tile, acc, y, bias, residual, M, N);
}
