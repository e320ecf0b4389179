// splitk_partial: one (row block, K chunk) task of a split-K GEMV. Each warp owns rows
// warp, warp + WARPS, ...; its lanes stride the chunk; a shuffle reduction sums them.
#include "splitk_partial.pipelink.h"

using namespace pl::splitk_partial;

extern "C" __device__ void splitk_partial(pl::Tile tile, const float* __restrict__ x, const float* __restrict__ w,
                                          float* __restrict__ partial, int M, int K) {
  const int row0 = tile.coord[0] * ROWS, k0 = tile.coord[1] * KCHUNK;
  const int k1 = min(K, k0 + KCHUNK);
  for (int r = warp_rank(); r < ROWS; r += WARPS) {
    const int m = row0 + r;
    if (m >= M) break;
    float acc = 0.0f;
    for (int k = k0 + pl::lane_index(); k < k1; k += 32) acc += x[(long long)m * K + k] * w[k];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (pl::lane_index() == 0) partial[(long long)tile.coord[1] * M + m] = acc;
  }
}
