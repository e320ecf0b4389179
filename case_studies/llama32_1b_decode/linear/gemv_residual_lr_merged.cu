// gemv_residual_lr_merged: gemv_residual_lr (W through the kernel's loader ring) whose x is attention's output
// o [B, 32 * 64], merged here from flash-decoding's split states (the attention team's records, `part`) instead
// of read from a tensor an attn_merge call wrote: the call's first task on a CTA merges all of o into shared
// memory with the attention team's arithmetic (attention.cuh's merge_vectors: o bit for bit as attn_merge writes
// it) and the tasks that continue the call reuse it. One call and one hand-off fewer a layer; each CTA reads
// every record (B * 8 * S * 1056 bytes) where attn_merge's tasks read them once.
#include "gemv_residual_lr_merged.pipelink.h"
#include "gemv.cuh"
#include "../attention/attention.cuh"

using namespace pl::gemv_residual_lr_merged;
using Ring = gemv_body::WLoaderRing<GEMV_ROWS, GEMV_RING_K>;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_residual_lr_merged: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, GEMV_ROWS> * 4, "contract gemv_residual_lr_merged: smem.buffers.sums is too small");
static_assert(GEMV_ROWS * GEMV_RING_K * 2 == Ring::kSlotBytes, "contract gemv_residual_lr_merged: loader.slot_bytes is not the slot's");
static_assert(attn_body::RECORD == 264, "contract gemv_residual_lr_merged: part's records are attention's");

// x = o: vector v of row b is o[b, v / 8, (v % 8) * 8 ...], query head v / 8 (K = 32 * 64); a thread merges its
// vector of every batch row in one sequence of records. MERGE_IN_FLIGHT records' loads a thread in flight (10
// floats each): 8, one round trip for the 8 splits of batch 1 at ctx 1024, links the decode step clean at 168
// registers (the most 9 warps an SM can have: registers go to warps in fours); 16 spills 304 bytes.
struct StageMerged {
  static constexpr bool kTransforms = false, kComputed = true;
  const float* part;
  int splits;
  __device__ __forceinline__ void begin(int, int) const {}
  template <class Out>
  __device__ __forceinline__ void column(int bg, int nb, int v, Out out) const {
    constexpr int VECS = attn_body::HEAD_DIM / 8;  // a query head's 16-byte vectors
    attn_body::merge_vectors<MERGE_IN_FLIGHT>(part, bg, nb, v / VECS, (v % VECS) * 8, splits, out);
  }
};

extern "C" __device__ void gemv_residual_lr_merged_load(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                        const float* __restrict__, const __nv_bfloat16* __restrict__,
                                                        __nv_bfloat16* __restrict__, int B, int N, int K, int L) {
  gemv_body::load_slots<GEMV_ROWS, GEMV_RING_K, GEMV_BATCH>(tile, w, tile.coord[0], B, K, LR_L2_ASKS());
}

extern "C" __device__ void gemv_residual_lr_merged(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                   const float* __restrict__ part, const __nv_bfloat16* r,
                                                   __nv_bfloat16* y, int B, int N, int K, int L) {
  const int splits = attn_body::split_count(B, L, SPLIT_TASKS(), SPLIT_MIN_L());
  gemv_body::rows_src<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH, true>(
      tile.coord[0] * GEMV_ROWS, Ring{tile}, StageMerged{part, splits}, r, y, B, N, K, smem_xs<uint4>(),
      smem_sums<float>(), tile.continues, [] { sync_stage(); });
}
