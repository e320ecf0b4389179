// seg_silu: h = silu(x) on one segment of TILE elements.
#include "seg_silu.pipelink.h"

using namespace pl::seg_silu;

extern "C" __device__ void seg_silu(pl::Tile tile, const float* __restrict__ x, float* __restrict__ h, int N) {
  for (int e = thread_rank(); e < TILE; e += THREADS) {
    const long long k = (long long)tile.coord[0] * TILE + e;
    if (k < N) h[k] = x[k] / (1.0f + __expf(-x[k]));
  }
}
