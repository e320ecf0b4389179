// moe_dispatch: lays the routed (token, k) pairs out expert by expert. Every task counts the rows of
// each expert over all tokens (the router has finished), so each can place its own tokens' pairs
// without a second pass: an expert's segment starts at the sum of the padded segments before it,
// and a pair's row is segment start + rows of earlier tokens + rank among this task's rows.
// Segments are padded to whole expert tiles (EXPERT_TILE_M rows): a tile never mixes experts.
#ifdef MOE_CLASSIC
#include "classic.h"
#else
#include "moe_dispatch.pipelink.h"
#endif

using namespace pl::moe_dispatch;

extern "C" __device__ void moe_dispatch(pl::Tile tile, const int* __restrict__ topk_ids, int* __restrict__ pair_tile,
                                        int* __restrict__ slot, int* __restrict__ row_token,
                                        int* __restrict__ tile_expert, int* __restrict__ tile_rows, int T, int E,
                                        int TOPK) {
  constexpr int kStride = DISPATCH_MAX_EXPERTS + 1;
  int* const total = smem_counts<int>();          // rows of each expert, all tokens
  int* const before = total + kStride;            // ... of the tokens before this task's
  int* const placed = total + 2 * kStride;        // ... placed so far by this task
  int* const start = total + 3 * kStride;         // padded segment start of each expert, start[E] = end
  const int tile_m = EXPERT_TILE_M();
  const int d = tile.coord[0];
  const long long first_pair = (long long)d * DISPATCH_TOKENS * TOPK;
  const long long pairs = (long long)T * TOPK;

  for (int e = thread_rank(); e < kStride; e += THREADS) total[e] = before[e] = placed[e] = 0;
  __syncthreads();
  for (long long p = thread_rank(); p < pairs; p += THREADS) {
    const int e = topk_ids[p];
    atomicAdd(&total[e], 1);
    if (p < first_pair) atomicAdd(&before[e], 1);
  }
  __syncthreads();
  // The padded segment starts: a scan over the experts by warp 0, each lane over kPerLane consecutive
  // experts (one thread walking all E of them was ~3 us of the layer's critical path at every T).
  constexpr int kPerLane = (DISPATCH_MAX_EXPERTS + 31) / 32;
  if (thread_rank() < 32) {
    const int lane = thread_rank(), e0 = lane * kPerLane;
    int padded[kPerLane], sum = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      padded[j] = e0 + j < E ? (total[e0 + j] + tile_m - 1) / tile_m * tile_m : 0;
      sum += padded[j];
    }
    int at = sum;  // inclusive scan of the lanes' sums
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, at, off);
      if (lane >= off) at += v;
    }
    at -= sum;  // exclusive: the rows before this lane's first expert
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (e0 + j < E) start[e0 + j] = at;
      at += padded[j];
    }
    if (lane == 31) start[E] = at;
  }
  __syncthreads();

  // This task's pairs. Pairs of tokens past T name no tile (-1: the glue skips them).
  const int max_tiles = (int)((pairs + tile_m - 1) / tile_m) + E;
  for (int p = thread_rank(); p < DISPATCH_TOKENS * TOPK; p += THREADS) {
    const long long pair = first_pair + p;
    if (pair >= pairs) {
      pair_tile[pair] = -1;
      continue;
    }
    const int e = topk_ids[pair];
    const int row = start[e] + before[e] + atomicAdd(&placed[e], 1);
    slot[pair] = row;
    row_token[row] = (int)(pair / TOPK);
    pair_tile[pair] = row / tile_m;
  }

  // Task 0 writes what every expert task reads first: its tile's expert and row count, and the
  // padding rows (-1: the expert zero-fills them).
  if (d == 0) {
    for (int i = thread_rank(); i < max_tiles; i += THREADS) {
      const int row0 = i * tile_m;
      int lo = 0, hi = E;  // the expert whose segment holds row0: start[lo] <= row0 < start[lo + 1]
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (start[mid] <= row0) lo = mid; else hi = mid;
      }
      const bool used = row0 < start[E];
      tile_expert[i] = used ? lo : -1;
      tile_rows[i] = used ? min(tile_m, total[lo] - (row0 - start[lo])) : 0;
    }
    for (int e = thread_rank(); e < E; e += THREADS)
      for (int row = start[e] + total[e]; row < start[e + 1]; ++row) row_token[row] = -1;
  }
}
