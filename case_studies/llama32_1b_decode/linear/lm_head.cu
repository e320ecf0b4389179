// lm_head: the first half of the greedy-decoding head. logits[b, n] = sum over k of x[b, k] * W[n, k],
// rounded once to bf16, for the GEMV_ROWS vocabulary rows of one task (gemv.cuh's walk, one row per
// warp); the task then reduces its rows of every batch row to one argmax key (argmax.cuh) of the rounded
// logits and writes it to part[b, task], the caller's u64 workspace [B, ceil_div(V, GEMV_ROWS)]; the glue
// then notifies partials. argmax_merge takes the maximum per batch row after every task is in.
#include "lm_head.pipelink.h"
#include "argmax.cuh"
#include "gemv.cuh"

using namespace pl::lm_head;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract lm_head: smem.buffers.xs is too small");
static_assert(smem_keys_bytes >= GEMV_BATCH * GEMV_ROWS * 8, "contract lm_head: smem.buffers.keys is too small");

extern "C" __device__ void lm_head(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                   const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ logits,
                                   unsigned long long* __restrict__ part, int B, int V, int K) {
  const int task = tile.coord[0], n0 = task * GEMV_ROWS;
  const int tasks = (V + GEMV_ROWS - 1) / GEMV_ROWS;
  unsigned long long* keys = smem_keys<unsigned long long>();  // [GEMV_BATCH][GEMV_ROWS] of one batch group
  const int t = thread_rank();
  gemv_body::rows_with<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH>(
      w, x, B, K, smem_xs<uint4>(), [=](int i) { return n0 + i < V ? n0 + i : -1; },
      [=](int i, int bg, int b, float s) {
        const int n = n0 + i;
        unsigned long long key = 0ull;
        if (n < V) {
          const __nv_bfloat16 v = __float2bfloat16_rn(s);
          logits[(long long)(bg + b) * V + n] = v;
          key = argmax_key::make(__bfloat162float(v), n);
        }
        keys[b * GEMV_ROWS + i] = key;
      },
      [=](int bg, int nb) {
        sync_stage();  // every warp's keys are in shared memory
        if (t < nb) {
          unsigned long long best = 0ull;
#pragma unroll
          for (int i = 0; i < GEMV_ROWS; ++i) best = max(best, keys[t * GEMV_ROWS + i]);
          part[(long long)(bg + t) * tasks + task] = best;
        }
        sync_stage();  // every thread has read the keys before the next batch group (or task) writes them
      },
      [] { sync_stage(); });
}
