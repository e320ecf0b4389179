// gemv_residual_lr: gemv_residual (gemv_residual.cu) with W through the kernel's loader ring: the load entry,
// run by the loader warp ahead of the task's waits, copies the task's GEMV_ROWS rows of W into the ring,
// GEMV_RING_K columns a slot; the entry multiplies each slot as it lands (gemv.cuh's rows_ring).
#include "gemv_residual_lr.pipelink.h"
#include "gemv.cuh"

using namespace pl::gemv_residual_lr;
using Ring = gemv_body::WLoaderRing<GEMV_ROWS, GEMV_RING_K>;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_residual_lr: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, GEMV_ROWS> * 4, "contract gemv_residual_lr: smem.buffers.sums is too small");
static_assert(GEMV_ROWS * GEMV_RING_K * 2 == Ring::kSlotBytes, "contract gemv_residual_lr: loader.slot_bytes is not the slot's");

extern "C" __device__ void gemv_residual_lr_load(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                 const __nv_bfloat16* __restrict__, const __nv_bfloat16* __restrict__,
                                                 __nv_bfloat16* __restrict__, int B, int N, int K) {
  gemv_body::load_slots<GEMV_ROWS, GEMV_RING_K, GEMV_BATCH>(tile, w, tile.coord[0], B, K, LR_L2_ASKS());
}

extern "C" __device__ void gemv_residual_lr(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                            const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* r,
                                            __nv_bfloat16* y, int B, int N, int K) {
  gemv_body::rows_src<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH, true>(
      tile.coord[0] * GEMV_ROWS, Ring{tile}, gemv_body::StageRaw{x, K}, r, y, B, N, K, smem_xs<uint4>(),
      smem_sums<float>(), tile.continues, [] { sync_stage(); });
}
