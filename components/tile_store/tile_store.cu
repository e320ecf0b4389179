// tile_store: one TILE_M x TILE_N tile, shared -> global memory (row-major y[M, N]). Rows and
// columns past the matrix are not stored.
#include "tile_store.pipelink.h"

using namespace pl::tile_store;

extern "C" __device__ void tile_store(pl::Tile tile, float* __restrict__ y, int M, int N) {
  const float* src = port_tile();
  // The contract declares both alignments: the linker places the tile so, the launcher checks y.
  if (reinterpret_cast<unsigned long long>(src) % port_tile_align) __trap();
  const int row0 = tile.coord[0] * TILE_M();
  const int col0 = tile.coord[1] * TILE_N();
  if (col0 + TILE_N() <= N && N % 4 == 0) {  // whole float4s in every row
    const int quads = TILE_N() / 4;
    for (int i = thread_rank(); i < TILE_M() * quads; i += THREADS) {
      const int r = i / quads, c = (i % quads) * 4;
      if (row0 + r < M)
        *reinterpret_cast<float4*>(y + (long long)(row0 + r) * N + col0 + c) =
            *reinterpret_cast<const float4*>(src + r * TILE_N() + c);
    }
  } else {
    for (int i = thread_rank(); i < TILE_M() * TILE_N(); i += THREADS) {
      const int r = i / TILE_N(), c = i % TILE_N();
      if (row0 + r < M && col0 + c < N) y[(long long)(row0 + r) * N + col0 + c] = src[i];
    }
  }
}
