// The task body gemv_swiglu and gemv_swiglu_normed share (see gemv_swiglu.cu): gemv.cuh's walk over the
// gate rows n0 .. n0 + C - 1 and the up rows I + n0 .. of one task with x staged by `stage`, then
// h = silu(gate) * up in fp32, rounded once.
#pragma once
#include "gemv.cuh"

namespace swiglu_body {

// Row of the stacked W of local row i of the task at n0: gate rows n0 + i, then up rows I + n0 + i - COLS.
template <int COLS>
__device__ __forceinline__ int row_of(int n0, int I, int i) {
  const int n = n0 + (i < COLS ? i : i - COLS);
  return n < I ? (i < COLS ? n : I + n) : -1;
}

// res: BATCH * ROWS floats of shared memory; sums, continues: gemv.cuh's rows_from; sync: the component's
// named barrier; W from `wsrc` (gemv.cuh's WGlobal, ring.cuh's WRing).
template <int WARPS, int ROWS, int KCHUNK, int BATCH, int COLS, class WSrc, class Stage, class Sync>
__device__ __forceinline__ void task_from(int n0, const WSrc& wsrc, const Stage& stage,
                                          __nv_bfloat16* __restrict__ h, int B, int I, int K,
                                          uint4* __restrict__ xs, float* __restrict__ res, float* __restrict__ sums,
                                          int continues, Sync sync) {
  static_assert(ROWS == 2 * COLS && ROWS % WARPS == 0, "gemv_swiglu: a task is COLS gate rows and as many up rows, split evenly over the warps");
  const int t = threadIdx.x % (WARPS * 32);
  gemv_body::rows_from<WARPS, ROWS, KCHUNK, BATCH>(
      wsrc, stage, B, K, xs, sums, continues,
      [=](int i) { return row_of<COLS>(n0, I, i); },
      [=](int i, int, int b, float s) { res[b * ROWS + i] = s; },
      [=](int bg, int nb) {
        sync();  // every warp's sums are in res
        if (t < nb * COLS) {
          const int b = t / COLS, c = t % COLS, n = n0 + c;
          if (n < I) {
            const float g = res[b * ROWS + c], u = res[b * ROWS + COLS + c];
            h[(long long)(bg + b) * I + n] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
          }
        }
        sync();  // every thread has read res before the next batch group (or task) writes it
      },
      sync);
}

// task with W from global memory.
template <int WARPS, int ROWS, int KCHUNK, int BATCH, int COLS, class Stage, class Sync>
__device__ __forceinline__ void task(int n0, const __nv_bfloat16* __restrict__ w, const Stage& stage,
                                     __nv_bfloat16* __restrict__ h, int B, int I, int K, uint4* __restrict__ xs,
                                     float* __restrict__ res, float* __restrict__ sums, int continues, Sync sync) {
  task_from<WARPS, ROWS, KCHUNK, BATCH, COLS>(n0, gemv_body::WGlobal{w, K}, stage, h, B, I, K, xs, res, sums, continues,
                                              sync);
}

}  // namespace swiglu_body
