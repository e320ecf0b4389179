// tile_load: one TILE_M x TILE_N tile of a row-major f32 matrix, global -> shared memory.
// Columns past N and rows past M are zero-filled so consumers may read the whole tile.
#include "tile_load.pipelink.h"

using namespace pl::tile_load;

extern "C" __device__ void tile_load(pl::Tile tile, const float* __restrict__ x, int M, int N) {
  float* dst = port_tile();
  const int row0 = tile.coord[0] * TILE_M;
  const int col0 = tile.coord[1] * TILE_N;
  const bool full = row0 + TILE_M <= M && col0 + TILE_N <= N && (N % 4) == 0;
  if (full) {  // the common case: 16-byte loads, every thread 4 columns at a time
    for (int i = thread_rank(); i < TILE_M * TILE_N / 4; i += THREADS) {
      const int r = i / (TILE_N / 4), c = (i % (TILE_N / 4)) * 4;
      const float4 v = __ldg(reinterpret_cast<const float4*>(x + (long long)(row0 + r) * N + col0 + c));
      *reinterpret_cast<float4*>(dst + r * TILE_N + c) = v;
    }
  } else {
    for (int i = thread_rank(); i < TILE_M * TILE_N; i += THREADS) {
      const int r = i / TILE_N, c = i % TILE_N;
      const int gr = row0 + r, gc = col0 + c;
      dst[i] = (gr < M && gc < N) ? __ldg(x + (long long)gr * N + gc) : 0.0f;
    }
  }
}
