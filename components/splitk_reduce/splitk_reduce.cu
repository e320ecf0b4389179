// splitk_reduce: y[m] = sum over K chunks of partial[k, m], for the rows of one block. The glue
// starts this task only once every chunk of the block has been notified. The partials were written
// in this launch by other CTAs: plain loads, never the read-only cache.
#include "splitk_reduce.pipelink.h"

using namespace pl::splitk_reduce;

extern "C" __device__ void splitk_reduce(pl::Tile tile, float* __restrict__ partial, float* __restrict__ y, int M,
                                         int K) {
  const int chunks = (K + KCHUNK() - 1) / KCHUNK();
  for (int r = thread_rank(); r < ROWS(); r += THREADS) {
    const int m = tile.coord[0] * ROWS() + r;
    if (m >= M) break;
    float acc = 0.0f;
    for (int k = 0; k < chunks; ++k) acc += partial[(long long)k * M + m];
    y[m] = acc;
  }
}
