// tile_transform: y = silu(x) * scale on a tile in shared memory.
#include "tile_transform.pipelink.h"

using namespace pl::tile_transform;

extern "C" __device__ void tile_transform(pl::Tile tile, float scale) {
  const float* src = port_src();
  float* dst = port_dst();
  const int n = TILE_M() * TILE_N();  // link-time constants: the loop bound folds
  for (int i = thread_rank(); i < n; i += THREADS) {
    const float v = src[i];
    dst[i] = v / (1.0f + __expf(-v)) * scale;
  }
}
