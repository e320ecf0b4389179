// moe_expert: expert e's rows offsets[e]..offsets[e+1] of the grouped buffer, y = silu(row) * scale[e].
// The rows were written by other CTAs in this launch: plain loads.
#include "moe_expert.pipelink.h"

using namespace pl::moe_expert;

extern "C" __device__ void moe_expert(pl::Tile tile, float* __restrict__ buf, const int* __restrict__ counts,
                                      const int* __restrict__ offsets, const float* __restrict__ scale,
                                      float* __restrict__ ybuf, int H, int E, int T, int TOPK) {
  const int e = tile.coord[0];
  const float s = scale[e];
  for (long long r = offsets[e]; r < offsets[e + 1]; ++r) {
    for (int h = thread_rank(); h < H; h += THREADS) {
      const float v = buf[r * H + h];
      ybuf[r * H + h] = v / (1.0f + __expf(-v)) * s;
    }
  }
}
