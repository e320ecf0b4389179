// gemv_swiglu_normed: gemv_swiglu (gemv_swiglu.cu) with the post-attention RMSNorm as its prologue. It
// reads the raw residual x [B, K] and stages xn = bf16(x * rsqrt(mean(x^2) + eps) * norm_w) (gemv.cuh's
// StageNormed: bit-identical to norm/rmsnorm.cu's output), so a fused layer needs no norm task and no
// grid-wide hand-off before the MLP; the CTA's first task of a call computes its batch rows'
// sums of squares (x read from L2) and stages xn, the tasks that continue the call on the CTA reuse it.
#include "gemv_swiglu_normed.pipelink.h"
#include "swiglu.cuh"

using namespace pl::gemv_swiglu_normed;
constexpr int TASK_ROWS = 2 * SWIGLU_COLS;  // a task's gate rows, then as many up rows
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_swiglu_normed: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, TASK_ROWS> * 4, "contract gemv_swiglu_normed: smem.buffers.sums is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * TASK_ROWS * 4, "contract gemv_swiglu_normed: smem.buffers.res is too small");
static_assert(smem_norm_bytes >= (WARPS + 1) * GEMV_BATCH * 4,
              "contract gemv_swiglu_normed: smem.buffers.norm is too small");

extern "C" __device__ void gemv_swiglu_normed(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                              const __nv_bfloat16* __restrict__ x,
                                              const __nv_bfloat16* __restrict__ norm_w, float eps,
                                              __nv_bfloat16* __restrict__ h, int B, int I, int K) {
  const auto sync = [] { sync_stage(); };
  const gemv_body::StageNormed<WARPS, GEMV_BATCH, decltype(sync)> stage{x, norm_w, eps, K, smem_norm<float>(), sync};
  swiglu_body::task<WARPS, TASK_ROWS, GEMV_KCHUNK, GEMV_BATCH, SWIGLU_COLS>(
      tile.coord[0] * SWIGLU_COLS, w, stage, h, B, I, K, smem_xs<uint4>(), smem_res<float>(), smem_sums<float>(),
      tile.continues, sync);
}
