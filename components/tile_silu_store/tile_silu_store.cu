// tile_silu_store: h = silu(x) on one TM x TN tile, global to global.
#include "tile_silu_store.pipelink.h"

using namespace pl::tile_silu_store;

extern "C" __device__ void tile_silu_store(pl::Tile tile, const float* __restrict__ x, float* __restrict__ h, int M,
                                           int N) {
  const int row0 = tile.coord[0] * TM, col0 = tile.coord[1] * TN;
  for (int e = thread_rank(); e < TM * TN; e += THREADS) {
    const int m = row0 + e / TN, n = col0 + e % TN;
    if (m < M && n < N) {
      const float v = x[(long long)m * N + n];
      h[(long long)m * N + n] = v / (1.0f + __expf(-v));
    }
  }
}
