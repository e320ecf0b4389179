// lm_head_lr: lm_head (lm_head.cu) with W through the kernel's loader ring: the load entry, run by the loader
// warp ahead of the task's waits, copies the task's LM_ROWS vocabulary rows into the ring, LM_RING_K columns a slot;
// the entry multiplies each slot as it lands (gemv.cuh's rows_ring).
#include "lm_head_lr.pipelink.h"
#include "lm_head.cuh"

using namespace pl::lm_head_lr;
using Ring = gemv_body::WLoaderRing<LM_ROWS, LM_RING_K>;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract lm_head_lr: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, LM_ROWS> * 4, "contract lm_head_lr: smem.buffers.sums is too small");
static_assert(smem_keys_bytes >= GEMV_BATCH * LM_ROWS * 8, "contract lm_head_lr: smem.buffers.keys is too small");
static_assert(LM_ROWS * LM_RING_K * 2 == Ring::kSlotBytes, "contract lm_head_lr: loader.slot_bytes is not the slot's");

extern "C" __device__ void lm_head_lr_load(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                           const __nv_bfloat16* __restrict__, __nv_bfloat16* __restrict__,
                                           unsigned long long* __restrict__, int B, int V, int K) {
  gemv_body::load_slots<LM_ROWS, LM_RING_K, GEMV_BATCH>(tile, w, tile.coord[0], B, K, LR_L2_ASKS());
}

extern "C" __device__ void lm_head_lr(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                      const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ logits,
                                      unsigned long long* __restrict__ part, int B, int V, int K) {
  lm_head_body::task<WARPS, LM_ROWS, GEMV_KCHUNK, GEMV_BATCH>(tile.coord[0], Ring{tile}, x, logits, part, B, V, K,
                                                                smem_xs<uint4>(), smem_keys<unsigned long long>(),
                                                                smem_sums<float>(), tile.continues, [] { sync_stage(); });
}
