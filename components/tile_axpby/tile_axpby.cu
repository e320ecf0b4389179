// tile_axpby: out = alpha * h + beta * x on one tile. h comes from another component's tasks in
// the same launch (the glue waited for ready[i, j]): plain loads.
#include "tile_axpby.pipelink.h"

using namespace pl::tile_axpby;

extern "C" __device__ void tile_axpby(pl::Tile tile, float* __restrict__ h, const float* __restrict__ x,
                                      float* __restrict__ out, float alpha, float beta, int M, int N) {
  const int row0 = tile.coord[0] * TM(), col0 = tile.coord[1] * TN();
  for (int e = thread_rank(); e < TM() * TN(); e += THREADS) {
    const int m = row0 + e / TN(), n = col0 + e % TN();
    if (m < M && n < N) {
      const long long i = (long long)m * N + n;
      out[i] = alpha * h[i] + beta * x[i];
    }
  }
}
