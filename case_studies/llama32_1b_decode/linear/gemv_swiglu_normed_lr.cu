// gemv_swiglu_normed_lr: gemv_swiglu_normed (gemv_swiglu_normed.cu) with W through the kernel's loader ring:
// the load entry, run by the loader warp ahead of the task's waits, copies the task's gate and up rows into the
// ring, SWIGLU_RING_K columns a slot; the entry multiplies each slot as it lands (gemv.cuh's rows_ring).
#include "gemv_swiglu_normed_lr.pipelink.h"
#include "swiglu.cuh"

using namespace pl::gemv_swiglu_normed_lr;
constexpr int TASK_ROWS = 2 * SWIGLU_COLS;  // a task's gate rows, then as many up rows
using Ring = gemv_body::WLoaderRing<TASK_ROWS, SWIGLU_RING_K>;
static_assert(H_PIECE == SWIGLU_COLS, "contract gemv_swiglu_normed_lr: h_piece notifies a task's columns of h, H_PIECE of them");
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_swiglu_normed_lr: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, TASK_ROWS> * 4, "contract gemv_swiglu_normed_lr: smem.buffers.sums is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * TASK_ROWS * 4, "contract gemv_swiglu_normed_lr: smem.buffers.res is too small");
static_assert(smem_norm_bytes >= (WARPS + 1) * GEMV_BATCH * 4, "contract gemv_swiglu_normed_lr: smem.buffers.norm is too small");
static_assert(TASK_ROWS * SWIGLU_RING_K * 2 == Ring::kSlotBytes, "contract gemv_swiglu_normed_lr: loader.slot_bytes is not the slot's");

extern "C" __device__ void gemv_swiglu_normed_lr_load(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                      const __nv_bfloat16* __restrict__,
                                                      const __nv_bfloat16* __restrict__ norm_w, float,
                                                      __nv_bfloat16* __restrict__, int B, int I, int K) {
  gemv_body::norm_w_ahead(tile, norm_w, K, LR_L2_ASKS());
  gemv_body::load_slots<TASK_ROWS, SWIGLU_RING_K, GEMV_BATCH>(tile, w, tile.coord[0], B, K, LR_L2_ASKS());
}

extern "C" __device__ void gemv_swiglu_normed_lr(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                 const __nv_bfloat16* __restrict__ x,
                                                 const __nv_bfloat16* __restrict__ norm_w, float eps,
                                                 __nv_bfloat16* __restrict__ h, int B, int I, int K) {
  const auto sync = [] { sync_stage(); };
  const gemv_body::StageNormed<WARPS, GEMV_BATCH, decltype(sync)> stage{x, norm_w, eps, K, smem_norm<float>(), sync,
      (LR_L2_ASKS() & gemv_body::kKeepNormW) != 0};
  swiglu_body::task_from<WARPS, TASK_ROWS, GEMV_KCHUNK, GEMV_BATCH, SWIGLU_COLS>(
      tile.coord[0] * SWIGLU_COLS, Ring{tile}, stage, h, B, I, K, smem_xs<uint4>(), smem_res<float>(),
      smem_sums<float>(), tile.continues, sync);
}
