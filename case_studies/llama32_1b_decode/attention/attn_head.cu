// attn_head: one task per (batch row b, KV head h): the 4 query heads of the group attend over the whole
// context (positions 0 .. L - 1 of a cache of capacity Lmax),
// o[b, 4h + g, :] = softmax(q[b, 4h + g, :] . k[b, h, :L, :]^T / 8) v[b, h, :L, :], rounded once to bf16.
#include "attn_head.pipelink.h"
#include "attention.cuh"

using namespace pl::attn_head;
static_assert(THREADS == attn_body::THREADS, "contract attn_head: the body needs 8 warps");
static_assert(smem_red_bytes >= attn_body::smem_bytes(ATTN_STAGES, ATTN_UNROLL),
              "contract attn_head: smem.buffers.red is too small");

extern "C" __device__ void attn_head(pl::Tile tile, const __nv_bfloat16* __restrict__ q,
                                     const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                     __nv_bfloat16* __restrict__ o, int B, int L, int Lmax) {
  const int b = tile.coord[0], h = tile.coord[1];
  const attn_body::State st =
      attn_body::attend<ATTN_UNROLL, ATTN_STAGES, ATTN_RING_ROUNDS, ATTN_WALK>(q, k, v, b, h, 0, L, Lmax, smem_red<float>(),
                                                                     [] { sync_merge(); });
  const int t = thread_rank();
  o[((long long)b * attn_body::Q_HEADS + h * attn_body::GROUP) * attn_body::HEAD_DIM + t] =
      __float2bfloat16_rn(st.acc / st.l);
}
