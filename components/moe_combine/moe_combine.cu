// moe_combine: token t gathers its TOPK expert rows back, weighted by the gates.
#include "moe_combine.pipelink.h"

using namespace pl::moe_combine;

extern "C" __device__ void moe_combine(pl::Tile tile, float* __restrict__ ybuf, const int* __restrict__ slot,
                                       const float* __restrict__ gate, float* __restrict__ y, int T, int H,
                                       int TOPK) {
  const int t = tile.coord[0];
  for (int h = thread_rank(); h < H; h += THREADS) {
    float acc = 0.0f;
    for (int k = 0; k < TOPK; ++k) acc += gate[t * TOPK + k] * ybuf[(long long)slot[t * TOPK + k] * H + h];
    y[(long long)t * H + h] = acc;
  }
}
