// moe_scatter: token t -> its TOPK rows of the expert-grouped buffer. The glue then notifies the
// experts topk[t, :] read from the device: how many rows an expert waits for depends on the routing.
#include "moe_scatter.pipelink.h"

using namespace pl::moe_scatter;

extern "C" __device__ void moe_scatter(pl::Tile tile, const float* __restrict__ x, const int* __restrict__ topk,
                                       const int* __restrict__ slot, float* __restrict__ buf, int T, int H, int TOPK,
                                       int E) {
  const int t = tile.coord[0];
  for (int k = 0; k < TOPK; ++k) {
    float* dst = buf + (long long)slot[t * TOPK + k] * H;
    for (int h = thread_rank(); h < H; h += THREADS) dst[h] = x[(long long)t * H + h];
  }
}
