// attn_split: flash-decoding, first half. Task (b, h, s) attends the 4 query heads of KV head h over split
// s of the context (attn_body::split_count: S balanced splits) and writes its unnormalized partial state to
// the workspace record part[b, h, s, :] (f32: acc [4][64], then m [4] in the log2 domain, then l [4]); the
// glue then notifies splits[b, h].
#include "attn_split.pipelink.h"
#include "attention.cuh"

using namespace pl::attn_split;
static_assert(THREADS == attn_body::THREADS, "contract attn_split: the body needs 8 warps");
static_assert(smem_red_bytes >= attn_body::smem_bytes(ATTN_STAGES, ATTN_UNROLL),
              "contract attn_split: smem.buffers.red is too small");
static_assert(PART_RECORD == attn_body::RECORD, "contract attn_split: a workspace record is acc, m and l of 4 heads");

// Before the task waits for its q: the split's first rounds of K and V into the ring, every position but the one
// this launch appends (pos[b]); the carried words say what was started (rounds, the position left out).
extern "C" __device__ void attn_split_prefetch(pl::Tile tile, const __nv_bfloat16* __restrict__ q,
                                               const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                               const int* __restrict__ pos, float* __restrict__ part, int B, int L,
                                               int Lmax, unsigned* __restrict__ carry) {
  const int b = tile.coord[0];
  attn_body::attend_split_ahead<ATTN_UNROLL, ATTN_STAGES, ATTN_WALK>(
      k, v, b, tile.coord[1], tile.coord[2], B, L, Lmax, SPLIT_TASKS(), SPLIT_MIN_L, __ldcg(pos + b), smem_red<float>())
      .store(carry);
}

extern "C" __device__ void attn_split(pl::Tile tile, const __nv_bfloat16* __restrict__ q,
                                      const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                      const int* __restrict__ pos, float* __restrict__ part, int B, int L, int Lmax,
                                      unsigned* __restrict__ carry) {
  attn_body::attend_split<ATTN_UNROLL, ATTN_STAGES, ATTN_RING_ROUNDS, ATTN_WALK>(
      q, k, v, part, tile.coord[0], tile.coord[1], tile.coord[2], B, L, Lmax, SPLIT_TASKS(), SPLIT_MIN_L, smem_red<float>(),
      [] { sync_merge(); }, thread_rank(), attn_body::Ahead::load(carry));
}
