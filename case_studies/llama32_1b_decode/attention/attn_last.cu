// attn_last: flash-decoding in one component. Task (b, h, s) attends split s of the context as attn_split
// does and writes its record to the workspace `part`; then it counts itself in arrived[b * 8 + h], and the
// task that arrives last merges the S records of (b, h) into o as attn_merge does, so no merge task waits
// for the splits and no hand-off separates them. The writers' order: every thread's record, the component's
// barrier, then one thread's fence and atomic add (the pattern of a grid barrier); the last arriver fences
// after its add before any thread reads the records (through L2). The last arriver also puts the count back
// to 0, so `arrived` is all zeros between launches (the caller zeroes it once).
#include "attn_last.pipelink.h"
#include "attention.cuh"

using namespace pl::attn_last;
static_assert(THREADS == attn_body::THREADS, "contract attn_last: the body needs 8 warps");
static_assert(smem_red_bytes >= attn_body::smem_bytes(ATTN_STAGES, ATTN_UNROLL),
              "contract attn_last: smem.buffers.red is too small");
static_assert(PART_RECORD == attn_body::RECORD, "contract attn_last: a workspace record is acc, m and l of 4 heads");

// Before the task waits for its q: the split's first rounds of K and V, as attn_split's prefetch.
extern "C" __device__ void attn_last_prefetch(pl::Tile tile, const __nv_bfloat16* __restrict__ q,
                                              const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                              const int* __restrict__ pos, float* __restrict__ part,
                                              int* __restrict__ arrived, __nv_bfloat16* __restrict__ o, int B, int L,
                                              int Lmax, unsigned* __restrict__ carry) {
  const int b = tile.coord[0];
  attn_body::attend_split_ahead<ATTN_UNROLL, ATTN_STAGES, ATTN_WALK>(
      k, v, b, tile.coord[1], tile.coord[2], B, L, Lmax, SPLIT_TASKS(), SPLIT_MIN_L, __ldcg(pos + b), smem_red<float>())
      .store(carry);
}

extern "C" __device__ void attn_last(pl::Tile tile, const __nv_bfloat16* __restrict__ q,
                                     const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                     const int* __restrict__ pos, float* __restrict__ part, int* __restrict__ arrived,
                                     __nv_bfloat16* __restrict__ o, int B, int L, int Lmax, unsigned* __restrict__ carry) {
  const int b = tile.coord[0], h = tile.coord[1], t = thread_rank();
  const int splits = attn_body::attend_split<ATTN_UNROLL, ATTN_STAGES, ATTN_RING_ROUNDS, ATTN_WALK>(
      q, k, v, part, b, h, tile.coord[2], B, L, Lmax, SPLIT_TASKS(), SPLIT_MIN_L, smem_red<float>(), [] { sync_merge(); }, t,
      attn_body::Ahead::load(carry));
  int* const last = smem_last<int>();
  sync_merge();  // every thread's record is written
  if (t == 0) {
    __threadfence();  // the records are visible to every CTA before the count moves
    int* const count = arrived + b * attn_body::KV_HEADS + h;
    const bool is_last = atomicAdd(count, 1) == splits - 1;
    if (is_last) {
      __threadfence();  // the other splits' records, fenced before their adds, are seen after ours
      *count = 0;       // every split of (b, h) has arrived: the count is free for the next launch
    }
    *last = is_last;
  }
  sync_merge();
  if (*last) attn_body::merge_records(part, o, b, h, splits, t);
}
