// ring_load: the producer warp of a warp-specialized pipeline. Writes one tile into the ring slot
// the glue hands it (tile.stage); the glue's full/empty mbarriers order it against the consumer.
#include "ring_load.pipelink.h"

using namespace pl::ring_load;

extern "C" __device__ void ring_load(pl::Tile tile, const float* __restrict__ x, int M, int N) {
  float* dst = port_tiles(tile.stage);
  const int lane = pl::lane_index();
  const int row0 = tile.coord[0] * TILE_M;
  const int col0 = tile.coord[1] * TILE_N;
  if (row0 + TILE_M <= M && col0 + TILE_N <= N && (N % 4) == 0) {
#pragma unroll 4
    for (int i = lane; i < TILE_M * TILE_N / 4; i += 32) {
      const int r = i / (TILE_N / 4), c = (i % (TILE_N / 4)) * 4;
      *reinterpret_cast<float4*>(dst + r * TILE_N + c) =
          __ldg(reinterpret_cast<const float4*>(x + (long long)(row0 + r) * N + col0 + c));
    }
  } else {
    for (int i = lane; i < TILE_M * TILE_N; i += 32) {
      const int gr = row0 + i / TILE_N, gc = col0 + i % TILE_N;
      dst[i] = (gr < M && gc < N) ? __ldg(x + (long long)gr * N + gc) : 0.0f;
    }
  }
}
