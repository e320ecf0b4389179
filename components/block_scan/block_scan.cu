// block_scan: inclusive prefix sum of i32 values, TILE per task. The glue starts task i only once
// task i - 1 has notified (its carry[i - 1] is written); task i then publishes carry[i] and the
// glue notifies after the block's writes are visible.
#include "block_scan.pipelink.h"

using namespace pl::block_scan;

constexpr int PER_THREAD = TILE / THREADS;
static_assert(TILE % THREADS == 0 && WARPS * 4 <= smem_warp_totals_bytes, "one i32 per warp");

extern "C" __device__ void block_scan(pl::Tile tile, const int* __restrict__ x, int* __restrict__ y,
                                      int* __restrict__ carry, int N) {
  const int t = thread_rank(), lane = t % 32, warp = t / 32;
  const long long base = (long long)tile.coord[0] * TILE + (long long)t * PER_THREAD;
  int v[PER_THREAD];
  int own = 0;
  for (int k = 0; k < PER_THREAD; ++k) {
    v[k] = base + k < N ? x[base + k] : 0;
    own += v[k];
  }
  int incl = own;  // inclusive scan of the threads' totals within the warp
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  int* totals = smem_warp_totals<int>();
  if (lane == 31) totals[warp] = incl;
  __syncwarp();
  sync_all();
  int before = tile.coord[0] > 0 ? carry[tile.coord[0] - 1] : 0;  // written by task i - 1 on another CTA
  for (int w = 0; w < warp; ++w) before += totals[w];
  int running = before + incl - own;
  for (int k = 0; k < PER_THREAD; ++k) {
    running += v[k];
    if (base + k < N) y[base + k] = running;
  }
  if (t == THREADS - 1) carry[tile.coord[0]] = running;  // the total through this block
  sync_all();  // every warp has read `totals` before the next task overwrites it
}
