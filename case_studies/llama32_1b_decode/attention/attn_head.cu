// attn_head: one task per (batch row b, KV head h): the 4 query heads of the group attend over the whole
// context (positions 0 .. L - 1 of a cache of capacity Lmax),
// o[b, 4h + g, :] = softmax(q[b, 4h + g, :] . k[b, h, :L, :]^T / 8) v[b, h, :L, :], rounded once to bf16.
#include "attn_head.pipelink.h"
#include "attention.cuh"

using namespace pl::attn_head;
static_assert(THREADS == attn_body::THREADS, "contract attn_head: the body needs 8 warps");
static_assert(smem_red_bytes >= attn_body::smem_bytes(ATTN_STAGES, ATTN_UNROLL),
              "contract attn_head: smem.buffers.red is too small");

// Before the task waits for its q: the first rounds of K and V into the ring, every position but the one this
// launch appends (pos[b]); the carried words say what was started (rounds, the position left out).
extern "C" __device__ void attn_head_prefetch(pl::Tile tile, const __nv_bfloat16* __restrict__ q,
                                              const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                              const int* __restrict__ pos, __nv_bfloat16* __restrict__ o, int B, int L,
                                              int Lmax, unsigned* __restrict__ carry) {
  const int b = tile.coord[0];
  attn_body::attend_range_ahead<ATTN_UNROLL, ATTN_STAGES, ATTN_WALK>(
      k, v, b, tile.coord[1], 0, L, Lmax, __ldcg(pos + b), smem_red<float>())
      .store(carry);
}

extern "C" __device__ void attn_head(pl::Tile tile, const __nv_bfloat16* __restrict__ q,
                                     const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                     const int* __restrict__ pos, __nv_bfloat16* __restrict__ o, int B, int L, int Lmax,
                                     unsigned* __restrict__ carry) {
  const int b = tile.coord[0], h = tile.coord[1];
  const attn_body::State st = attn_body::attend<ATTN_UNROLL, ATTN_STAGES, ATTN_RING_ROUNDS, ATTN_WALK>(
      q, k, v, b, h, 0, L, Lmax, smem_red<float>(), [] { sync_merge(); }, attn_body::Ahead::load(carry));
  const int t = thread_rank();
  o[((long long)b * attn_body::Q_HEADS + h * attn_body::GROUP) * attn_body::HEAD_DIM + t] =
      __float2bfloat16_rn(st.acc / st.l);
}
