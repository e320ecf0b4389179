// row_softmax: y[m, :] = softmax(y[m, :]) in place for the rows of one row block, a warp per row.
// The rows were written earlier in this launch (by this CTA): plain loads, not the read-only cache.
#include "row_softmax.pipelink.h"

using namespace pl::row_softmax;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __device__ void row_softmax(pl::Tile tile, float* __restrict__ y, int M, int N) {
  const int lane = thread_rank() % 32;
  for (int r = warp_rank(); r < TILE_M(); r += WARPS) {
    const int m = tile.coord[0] * TILE_M() + r;
    if (m >= M) break;
    float* row = y + (long long)m * N;
    float top = -INFINITY;
    for (int n = lane; n < N; n += 32) top = fmaxf(top, row[n]);
    top = warp_max(top);
    float sum = 0.0f;
    for (int n = lane; n < N; n += 32) sum += __expf(row[n] - top);
    const float inv = 1.0f / warp_sum(sum);
    for (int n = lane; n < N; n += 32) row[n] = __expf(row[n] - top) * inv;
  }
}
