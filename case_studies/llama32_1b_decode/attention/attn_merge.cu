// attn_merge: flash-decoding, second half. Task (b, h) starts once every split of (b, h) has written its
// record (the wait on splits[b, h]); thread t = 64 * g + d merges the splits' states of query head 4h + g
// in order, o = acc / l, rounded once to bf16. The records were written in this launch by other CTAs:
// loads through L2 (__ldcg), never the read-only cache.
#include <math_constants.h>
#include "attn_merge.pipelink.h"
#include "attention.cuh"

using namespace pl::attn_merge;
static_assert(THREADS == attn_body::THREADS, "contract attn_merge: one thread per (query head, dimension)");

extern "C" __device__ void attn_merge(pl::Tile tile, const float* __restrict__ part, __nv_bfloat16* __restrict__ o,
                                      int B, int L) {
  constexpr int RECORD = attn_body::RECORD;
  const int b = tile.coord[0], h = tile.coord[1];
  const int splits = (L + SPLIT_L() - 1) / SPLIT_L();
  const int t = thread_rank();
  const int head = t / attn_body::HEAD_DIM;
  const float* rec = part + ((long long)b * attn_body::KV_HEADS + h) * splits * RECORD;
  float m = -CUDART_INF_F, l = 0.0f, acc = 0.0f;
  for (int s = 0; s < splits; ++s, rec += RECORD) {
    const float ms = __ldcg(rec + attn_body::GROUP * attn_body::HEAD_DIM + head);
    const float ls = __ldcg(rec + attn_body::GROUP * attn_body::HEAD_DIM + attn_body::GROUP + head);
    const float as = __ldcg(rec + t);
    const float mn = fmaxf(m, ms);
    const float c = exp2f(m - mn);  // 0 for the first split
    const float w = exp2f(ms - mn);
    l = fmaf(l, c, ls * w);
    acc = fmaf(acc, c, as * w);
    m = mn;
  }
  o[((long long)b * attn_body::Q_HEADS + h * attn_body::GROUP) * attn_body::HEAD_DIM + t] = __float2bfloat16_rn(acc / l);
}
