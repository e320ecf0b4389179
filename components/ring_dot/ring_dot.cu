// ring_dot: the consumer warpgroup of a warp-specialized pipeline. For the tile in ring slot
// tile.stage, writes out[m, j] = sum_n tile[m, n] * w[j * TILE_N + n].
#include "ring_dot.pipelink.h"

using namespace pl::ring_dot;

extern "C" __device__ void ring_dot(pl::Tile tile, const float* __restrict__ w, float* __restrict__ out,
                                    int M, int N) {
  const float* t = port_tiles(tile.stage);
  const int warp = warp_rank(), lane = pl::lane_index();
  const int row0 = tile.coord[0] * TILE_M(), col0 = tile.coord[1] * TILE_N();
  const int tiles_n = (N + TILE_N() - 1) / TILE_N();
  for (int r = warp; r < TILE_M(); r += WARPS) {
    float acc = 0.0f;
    for (int c = lane; c < TILE_N(); c += 32)
      acc += t[r * TILE_N() + c] * (col0 + c < N ? __ldg(w + col0 + c) : 0.0f);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0 && row0 + r < M) out[(long long)(row0 + r) * tiles_n + tile.coord[1]] = acc;
  }
}
