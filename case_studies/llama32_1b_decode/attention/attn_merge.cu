// attn_merge: flash-decoding, second half. Task (b, h) starts once every split of (b, h) has written its
// record (the wait on splits[b, h]); thread t = 64 * g + d merges the splits' states of query head 4h + g
// in order (the S splits of attn_body::split_count, as attn_split cut the context), o = acc / l, rounded
// once to bf16. The records were written in this launch by other CTAs: loads through L2 (__ldcg), never the
// read-only cache.
#include <math_constants.h>
#include "attn_merge.pipelink.h"
#include "attention.cuh"

using namespace pl::attn_merge;
static_assert(THREADS == attn_body::THREADS, "contract attn_merge: one thread per (query head, dimension)");

extern "C" __device__ void attn_merge(pl::Tile tile, const float* __restrict__ part, __nv_bfloat16* __restrict__ o,
                                      int B, int L) {
  constexpr int RECORD = attn_body::RECORD;
  const int b = tile.coord[0], h = tile.coord[1];
  const int splits = attn_body::split_count(B, L, SPLIT_TASKS(), SPLIT_MIN_L());
  const int t = thread_rank();
  const int head = t / attn_body::HEAD_DIM;
  const float* rec = part + ((long long)b * attn_body::KV_HEADS + h) * splits * RECORD;
  float m = -CUDART_INF_F, l = 0.0f, acc = 0.0f;
  // IN_FLIGHT records' loads are issued before any is combined: the merge is a chain of L2 round trips
  // otherwise (up to SPLIT_TASKS / 8 splits at batch 1)
  constexpr int IN_FLIGHT = 8;
  for (int s0 = 0; s0 < splits; s0 += IN_FLIGHT, rec += IN_FLIGHT * RECORD) {
    float ms[IN_FLIGHT], ls[IN_FLIGHT], as[IN_FLIGHT];
#pragma unroll
    for (int i = 0; i < IN_FLIGHT; ++i) {
      const bool in = s0 + i < splits;
      const float* r = rec + i * RECORD;
      ms[i] = in ? __ldcg(r + attn_body::GROUP * attn_body::HEAD_DIM + head) : -CUDART_INF_F;
      ls[i] = in ? __ldcg(r + attn_body::GROUP * attn_body::HEAD_DIM + attn_body::GROUP + head) : 0.0f;
      as[i] = in ? __ldcg(r + t) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < IN_FLIGHT; ++i) {
      if (s0 + i >= splits) break;  // every split covers at least one position: its m is finite
      const float mn = fmaxf(m, ms[i]);
      const float c = exp2f(m - mn);  // 0 for the first split
      const float w = exp2f(ms[i] - mn);
      l = fmaf(l, c, ls[i] * w);
      acc = fmaf(acc, c, as[i] * w);
      m = mn;
    }
  }
  o[((long long)b * attn_body::Q_HEADS + h * attn_body::GROUP) * attn_body::HEAD_DIM + t] = __float2bfloat16_rn(acc / l);
}
