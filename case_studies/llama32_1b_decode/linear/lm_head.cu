// lm_head: the first half of the greedy-decoding head. logits[b, n] = sum over k of x[b, k] * W[n, k],
// rounded once to bf16, for the LM_ROWS vocabulary rows of one task (gemv.cuh's walk, one row per
// warp); the task then reduces its rows of every batch row to one argmax key (argmax.cuh) of the rounded
// logits and writes it to part[b, task], the caller's u64 workspace [B, ceil_div(V, LM_ROWS)]; the glue
// then notifies partials. argmax_merge takes the maximum per batch row after every task is in.
#include "lm_head.pipelink.h"
#include "lm_head.cuh"

using namespace pl::lm_head;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract lm_head: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, LM_ROWS> * 4, "contract lm_head: smem.buffers.sums is too small");
static_assert(smem_keys_bytes >= GEMV_BATCH * LM_ROWS * 8, "contract lm_head: smem.buffers.keys is too small");

extern "C" __device__ void lm_head(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                   const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ logits,
                                   unsigned long long* __restrict__ part, int B, int V, int K) {
  lm_head_body::task<WARPS, LM_ROWS, GEMV_KCHUNK, GEMV_BATCH>(tile.coord[0], gemv_body::WGlobal{w, K}, x, logits,
                                                                part, B, V, K, smem_xs<uint4>(),
                                                                smem_keys<unsigned long long>(), smem_sums<float>(),
                                                                tile.continues, [] { sync_stage(); });
}
