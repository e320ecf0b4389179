// block_rowsum: per-tile row sums of a shared-memory tile with cub::WarpReduce.
// Each warp owns rows warp, warp + WARPS, ...; its lanes stride the columns.
// The WarpReduce temp storage lives in the linker-allocated scratch buffer reduce_temp.
#include <cub/warp/warp_reduce.cuh>
#include "block_rowsum.pipelink.h"

using namespace pl::block_rowsum;
using WarpSum = cub::WarpReduce<float>;
static_assert(sizeof(WarpSum::TempStorage) * WARPS <= smem_reduce_temp_bytes,
              "contract block_rowsum: smem.buffers.reduce_temp is too small for cub::WarpReduce");
static_assert(alignof(WarpSum::TempStorage) <= smem_reduce_temp_align,
              "contract block_rowsum: smem.buffers.reduce_temp is under-aligned");

extern "C" __device__ void block_rowsum(pl::Tile tile, float* __restrict__ out, int M, int N) {
  const float* t = port_tile();
  auto* temp = smem_reduce_temp<WarpSum::TempStorage>();
  const int warp = warp_rank(), lane = pl::lane_index();
  const int row0 = tile.coord[0] * TILE_M();
  const int tiles_n = (N + TILE_N() - 1) / TILE_N();
  for (int r = warp; r < TILE_M(); r += WARPS) {
    float acc = 0.0f;
    for (int c = lane; c < TILE_N(); c += 32) acc += t[r * TILE_N() + c];
    const float sum = WarpSum(temp[warp]).Sum(acc);
    if (lane == 0 && row0 + r < M) out[(long long)(row0 + r) * tiles_n + tile.coord[1]] = sum;
  }
}
