// lm_head_normed_lr: lm_head_lr (lm_head_lr.cu) of rmsnorm(x): the final norm as the prologue (gemv.cuh's
// StageNormed, as the normed q/k/v and gate/up GEMVs do), so the step needs no final_norm call and no hand-off
// between it and the head. Each task norms the raw residual x itself; W through the kernel's loader ring.
#include "lm_head_normed_lr.pipelink.h"
#include "lm_head.cuh"

using namespace pl::lm_head_normed_lr;
using Ring = gemv_body::WLoaderRing<LM_ROWS, LM_RING_K>;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract lm_head_normed_lr: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, LM_ROWS> * 4, "contract lm_head_normed_lr: smem.buffers.sums is too small");
static_assert(smem_keys_bytes >= GEMV_BATCH * LM_ROWS * 8, "contract lm_head_normed_lr: smem.buffers.keys is too small");
static_assert(smem_norm_bytes >= (WARPS + 1) * GEMV_BATCH * 4, "contract lm_head_normed_lr: smem.buffers.norm is too small");
static_assert(LM_ROWS * LM_RING_K * 2 == Ring::kSlotBytes, "contract lm_head_normed_lr: loader.slot_bytes is not the slot's");

extern "C" __device__ void lm_head_normed_lr_load(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                  const __nv_bfloat16* __restrict__,
                                                  const __nv_bfloat16* __restrict__ norm_w, float,
                                                  __nv_bfloat16* __restrict__, unsigned long long* __restrict__, int B,
                                                  int V, int K) {
  gemv_body::norm_w_ahead(tile, norm_w, K, LR_L2_ASKS());
  gemv_body::load_slots<LM_ROWS, LM_RING_K, GEMV_BATCH>(tile, w, tile.coord[0], B, K, LR_L2_ASKS());
}

extern "C" __device__ void lm_head_normed_lr(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                             const __nv_bfloat16* __restrict__ x,
                                             const __nv_bfloat16* __restrict__ norm_w, float eps,
                                             __nv_bfloat16* __restrict__ logits, unsigned long long* __restrict__ part,
                                             int B, int V, int K) {
  const auto sync = [] { sync_stage(); };
  const gemv_body::StageNormed<WARPS, GEMV_BATCH, decltype(sync)> stage{x, norm_w, eps, K, smem_norm<float>(), sync,
      (LR_L2_ASKS() & gemv_body::kKeepNormW) != 0};
  lm_head_body::task_from<WARPS, LM_ROWS, GEMV_KCHUNK, GEMV_BATCH>(tile.coord[0], Ring{tile}, stage, logits, part, B,
                                                                   V, K, smem_xs<uint4>(), smem_keys<unsigned long long>(),
                                                                   smem_sums<float>(), tile.continues, sync);
}
