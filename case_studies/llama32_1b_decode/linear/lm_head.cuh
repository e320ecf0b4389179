// The task body lm_head and lm_head_ring share (see lm_head.cu): gemv.cuh's walk over the task's LM_ROWS
// vocabulary rows, the rounded logits stored, and the task's argmax key per batch row to `part`.
#pragma once
#include "argmax.cuh"
#include "gemv.cuh"

namespace lm_head_body {

// keys: BATCH * ROWS u64 of shared memory; sync: the component's named barrier; W from `wsrc`; x staged by
// `stage` (gemv.cuh: StageRaw, or StageNormed for the final norm as the prologue).
template <int WARPS, int ROWS, int KCHUNK, int BATCH, class WSrc, class Stage, class Sync>
__device__ __forceinline__ void task_from(int task, const WSrc& wsrc, const Stage& stage,
                                          __nv_bfloat16* __restrict__ logits, unsigned long long* __restrict__ part,
                                          int B, int V, int K, uint4* __restrict__ xs, unsigned long long* keys,
                                          float* __restrict__ sums, int continues, Sync sync) {
  const int n0 = task * ROWS;
  const int tasks = (V + ROWS - 1) / ROWS;
  const int t = threadIdx.x % (WARPS * 32);
  gemv_body::rows_from<WARPS, ROWS, KCHUNK, BATCH>(
      wsrc, stage, B, K, xs, sums, continues, [=](int i) { return n0 + i < V ? n0 + i : -1; },
      [=](int i, int bg, int b, float s) {
        const int n = n0 + i;
        unsigned long long key = 0ull;
        if (n < V) {
          const __nv_bfloat16 v = __float2bfloat16_rn(s);
          logits[(long long)(bg + b) * V + n] = v;
          key = argmax_key::make(__bfloat162float(v), n);
        }
        keys[b * ROWS + i] = key;
      },
      [=](int bg, int nb) {
        sync();  // every warp's keys are in shared memory
        if (t < nb) {
          unsigned long long best = 0ull;
#pragma unroll
          for (int i = 0; i < ROWS; ++i) best = max(best, keys[t * ROWS + i]);
          part[(long long)(bg + t) * tasks + task] = best;
        }
        sync();  // every thread has read the keys before the next batch group (or task) writes them
      },
      sync);
}

template <int WARPS, int ROWS, int KCHUNK, int BATCH, class WSrc, class Sync>
__device__ __forceinline__ void task(int task, const WSrc& wsrc, const __nv_bfloat16* __restrict__ x,
                                     __nv_bfloat16* __restrict__ logits, unsigned long long* __restrict__ part, int B,
                                     int V, int K, uint4* __restrict__ xs, unsigned long long* keys,
                                     float* __restrict__ sums, int continues, Sync sync) {
  task_from<WARPS, ROWS, KCHUNK, BATCH>(task, wsrc, gemv_body::StageRaw{x, K}, logits, part, B, V, K, xs, keys, sums,
                                        continues, sync);
}

}  // namespace lm_head_body
