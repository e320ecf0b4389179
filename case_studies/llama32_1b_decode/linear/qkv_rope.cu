// qkv_rope: the fused q/k/v projection of one decode step with the rotary embedding and the KV-cache append.
// W_qkv [3072, K] stacks the 32 q heads, the 8 k heads and the 8 v heads of 64 rows each (q_proj, k_proj,
// v_proj concatenated). Task (hd, j) of head hd owns the 8 rows hd * 64 + {4j .. 4j+3} and hd * 64 + 32 +
// {4j .. 4j+3}: 4 rotary pairs (d, d + 32), one row per warp, walked by gemv.cuh. The fp32 sums meet in
// shared memory (res); thread 4b + p then rotates pair d = 4j + p of batch row b by the angle
// pos[b] * theta^(-2d/64) (the half-split convention of Llama: out[d] = x[d] cos - x[d+32] sin,
// out[d+32] = x[d+32] cos + x[d] sin; angle, cos and sin in fp64, through sincospi) and rounds once to bf16:
//   q heads (hd < 32): rotated, to q[b, hd, :];
//   k heads (32 <= hd < 40): rotated, to k_cache[b * 8 + hd - 32, pos[b], :];
//   v heads (40 <= hd < 48): as they are, to v_cache[b * 8 + hd - 40, pos[b], :].
// A position outside [0, Lmax) writes q (rotated by it) but nothing to the caches.
#include "qkv_rope.pipelink.h"
#include "gemv.cuh"

using namespace pl::qkv_rope;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract qkv_rope: smem.buffers.xs is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * GEMV_ROWS * 4, "contract qkv_rope: smem.buffers.res is too small");
static_assert(GEMV_ROWS == 8 && WARPS == 8, "qkv_rope: a task is 4 rotary pairs, one row per warp");

namespace {
constexpr int HEAD_DIM = 64, HALF = 32, Q_HEADS = 32, KV_HEADS = 8, PAIRS = GEMV_ROWS / 2;
}

extern "C" __device__ void qkv_rope(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                    const __nv_bfloat16* __restrict__ x, const int* __restrict__ pos, float theta,
                                    __nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k_cache,
                                    __nv_bfloat16* __restrict__ v_cache, int B, int K, int Lmax) {
  const int hd = tile.coord[0], j = tile.coord[1];
  const int row0 = hd * HEAD_DIM + j * PAIRS;  // local row i < 4: row0 + i; i >= 4: row0 + 32 + i - 4
  float* res = smem_res<float>();               // [GEMV_BATCH][GEMV_ROWS] fp32 sums of one batch group
  const int t = thread_rank();
  gemv_body::rows_with<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH>(
      w, x, B, K, smem_xs<uint4>(), [=](int i) { return row0 + (i < PAIRS ? i : HALF + i - PAIRS); },
      [=](int i, int, int b, float s) { res[b * GEMV_ROWS + i] = s; },
      [=](int bg, int nb) {
        sync_stage();  // every warp's sums are in res
        if (t < nb * PAIRS) {
          const int b = t / PAIRS, p = t % PAIRS, d = j * PAIRS + p;
          const float x1 = res[b * GEMV_ROWS + p], x2 = res[b * GEMV_ROWS + PAIRS + p];
          const int bb = bg + b, position = __ldg(pos + bb);
          float o1 = x1, o2 = x2;
          if (hd < Q_HEADS + KV_HEADS) {
            const double inv_freq = exp2(-(double)(2 * d) / HEAD_DIM * log2((double)theta));
            double sn, cs;  // in turns of pi: sincospi needs no long argument reduction (no slow path)
            sincospi((double)position * inv_freq * 0.31830988618379067154, &sn, &cs);
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
        sync_stage();  // every thread has read res before the next batch group (or task) writes it
      },
      [] { sync_stage(); });
}
