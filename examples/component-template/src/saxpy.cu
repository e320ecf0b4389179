// saxpy: y[k] = a * x[k] + y[k] on one tile. Written against the header pipelink generates from
// contracts/saxpy.json (`pipelink build` puts it on the include path): TILE() and THREADS are the
// link's values, the entry's signature is the contract's.
#include "saxpy.pipelink.h"

using namespace pl::saxpy;

extern "C" __device__ void saxpy(pl::Tile tile, const float* __restrict__ x, float* __restrict__ y, float a, int N) {
  for (int e = thread_rank(); e < TILE(); e += THREADS) {
    const long long k = (long long)tile.coord[0] * TILE() + e;
    if (k < N) y[k] = a * x[k] + y[k];
  }
}
