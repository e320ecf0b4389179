// attn_merge: flash-decoding, second half. Task (b, h) starts once every split of (b, h) has written its
// record (the wait on splits[b, h]); thread t = 64 * g + d merges the splits' states of query head 4h + g
// in order (the S splits of attn_body::split_count, as attn_split cut the context), o = acc / l, rounded
// once to bf16. The records were written in this launch by other CTAs: loads through L2 (__ldcg), never the
// read-only cache.
#include "attn_merge.pipelink.h"
#include "attention.cuh"

using namespace pl::attn_merge;
static_assert(THREADS == attn_body::THREADS, "contract attn_merge: one thread per (query head, dimension)");

extern "C" __device__ void attn_merge(pl::Tile tile, const float* __restrict__ part, __nv_bfloat16* __restrict__ o,
                                      int B, int L) {
  const int b = tile.coord[0], h = tile.coord[1];
  attn_body::merge_records(part, o, b, h, attn_body::split_count(B, L, SPLIT_TASKS(), SPLIT_MIN_L()), thread_rank());
}
