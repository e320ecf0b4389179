// stencil3: y[k] = (h[k - 1] + h[k] + h[k + 1]) / 3 on one segment, the edges clamped. The halo
// elements belong to the neighbouring segments, which the glue has waited for (clamped map).
// h was written in this launch by other CTAs: plain loads, not the read-only cache.
#include "stencil3.pipelink.h"

using namespace pl::stencil3;

extern "C" __device__ void stencil3(pl::Tile tile, float* __restrict__ h, float* __restrict__ y, int N) {
  for (int e = thread_rank(); e < TILE(); e += THREADS) {
    const long long k = (long long)tile.coord[0] * TILE() + e;
    if (k >= N) break;
    const long long lo = k > 0 ? k - 1 : 0, hi = k + 1 < N ? k + 1 : N - 1;
    y[k] = (h[lo] + h[k] + h[hi]) * (1.0f / 3.0f);
  }
}
