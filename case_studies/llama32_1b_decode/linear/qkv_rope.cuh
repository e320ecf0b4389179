// The task body qkv_rope and qkv_rope_normed share (see qkv_rope.cu): gemv.cuh's walk over the ROWS rows of
// task (hd, j) with x staged by `stage`, then the rotation and the stores.
#pragma once
#include "gemv.cuh"

namespace qkv_body {

constexpr int HEAD_DIM = 64, HALF = 32, Q_HEADS = 32, KV_HEADS = 8;

// Row of W_qkv of task (hd, j)'s local row i: i < 4 the pair's first halves row0 + i, then their partners + 32.
template <int ROWS>
__device__ __forceinline__ int row_of(int hd, int j, int i) {
  constexpr int PAIRS = ROWS / 2;
  const int row0 = hd * HEAD_DIM + j * PAIRS;
  return row0 + (i < PAIRS ? i : HALF + i - PAIRS);
}

// res: BATCH * ROWS floats of shared memory; sync: the component's named barrier.
// W from `wsrc` (gemv.cuh's WGlobal, ring.cuh's WRing).
template <int WARPS, int ROWS, int KCHUNK, int BATCH, class WSrc, class Stage, class Sync>
__device__ __forceinline__ void task_from(int hd, int j, const WSrc& wsrc, const Stage& stage,
                                     const int* __restrict__ pos, const float* __restrict__ inv_freq,
                                     __nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k_cache,
                                     __nv_bfloat16* __restrict__ v_cache, int B, int K, int Lmax,
                                     uint4* __restrict__ xs, float* __restrict__ res, float* __restrict__ sums,
                                     int continues, Sync sync) {
  static_assert(ROWS % 2 == 0 && HALF % (ROWS / 2) == 0 && WARPS == 8,
                "qkv_rope: a task is ROWS / 2 rotary pairs of a head (the grid's 64 // ROWS tasks a head), over 8 warps");
  constexpr int PAIRS = ROWS / 2;
  const int t = threadIdx.x % (WARPS * 32);
  gemv_body::rows_from<WARPS, ROWS, KCHUNK, BATCH>(
      wsrc, stage, B, K, xs, sums, continues, [=](int i) { return row_of<ROWS>(hd, j, i); },
      [=](int i, int, int b, float s) { res[b * ROWS + i] = s; },
      [=](int bg, int nb) {
        sync();  // every warp's sums are in res
        if (t < nb * PAIRS) {
          const int b = t / PAIRS, p = t % PAIRS, d = j * PAIRS + p;
          const float x1 = res[b * ROWS + p], x2 = res[b * ROWS + PAIRS + p];
          // pos may come from the device in a fused step: a coherent load; inv_freq is the host's constant
          const int bb = bg + b, position = __ldcg(pos + bb);
          float o1 = x1, o2 = x2;
          if (hd < Q_HEADS + KV_HEADS) {
            double sn, cs;  // in turns of pi: sincospi needs no long argument reduction (no slow path)
            sincospi((double)position * (double)__ldg(inv_freq + d) * 0.31830988618379067154, &sn, &cs);
            o1 = (float)((double)x1 * cs - (double)x2 * sn);
            o2 = (float)((double)x2 * cs + (double)x1 * sn);
          }
          __nv_bfloat16* out = nullptr;
          if (hd < Q_HEADS) {
            out = q + ((long long)bb * Q_HEADS + hd) * HEAD_DIM;
          } else if (position >= 0 && position < Lmax) {
            const int kv = hd < Q_HEADS + KV_HEADS ? hd - Q_HEADS : hd - Q_HEADS - KV_HEADS;
            __nv_bfloat16* cache = hd < Q_HEADS + KV_HEADS ? k_cache : v_cache;
            out = cache + (((long long)bb * KV_HEADS + kv) * Lmax + position) * HEAD_DIM;
          }
          if (out != nullptr) {
            out[d] = __float2bfloat16_rn(o1);
            out[d + HALF] = __float2bfloat16_rn(o2);
          }
        }
        sync();  // every thread has read res before the next batch group (or task) writes it
      },
      sync);
}

// task with W from global memory.
template <int WARPS, int ROWS, int KCHUNK, int BATCH, class Stage, class Sync>
__device__ __forceinline__ void task(int hd, int j, const __nv_bfloat16* __restrict__ w, const Stage& stage,
                                     const int* __restrict__ pos, const float* __restrict__ inv_freq,
                                     __nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k_cache,
                                     __nv_bfloat16* __restrict__ v_cache, int B, int K, int Lmax,
                                     uint4* __restrict__ xs, float* __restrict__ res, float* __restrict__ sums,
                                     int continues, Sync sync) {
  task_from<WARPS, ROWS, KCHUNK, BATCH>(hd, j, gemv_body::WGlobal{w, K}, stage, pos, inv_freq, q, k_cache, v_cache, B,
                                        K, Lmax, xs, res, sums, continues, sync);
}

}  // namespace qkv_body
