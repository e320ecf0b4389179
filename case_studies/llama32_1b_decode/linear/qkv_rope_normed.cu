// qkv_rope_normed: qkv_rope (qkv_rope.cu) with the layer's input RMSNorm as its prologue. It reads the raw
// residual x [B, K] and stages xn = bf16(x * rsqrt(mean(x^2) + eps) * norm_w) (gemv.cuh's StageNormed:
// bit-identical to norm/rmsnorm.cu's output), so a fused layer needs no norm task and no grid-wide hand-off
// before the projection; the CTA's first task of a call computes its batch rows'
// sums of squares (x read from L2) and stages xn, the tasks that continue the call on the CTA reuse it.
#include "qkv_rope_normed.pipelink.h"
#include "qkv_rope.cuh"

using namespace pl::qkv_rope_normed;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract qkv_rope_normed: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, QKV_ROWS> * 4, "contract qkv_rope_normed: smem.buffers.sums is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * QKV_ROWS * 4, "contract qkv_rope_normed: smem.buffers.res is too small");
static_assert(smem_norm_bytes >= (WARPS + 1) * GEMV_BATCH * 4,
              "contract qkv_rope_normed: smem.buffers.norm is too small");

extern "C" __device__ void qkv_rope_normed(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                           const __nv_bfloat16* __restrict__ x,
                                           const __nv_bfloat16* __restrict__ norm_w, float eps,
                                           const int* __restrict__ pos, const float* __restrict__ inv_freq,
                                           __nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k_cache,
                                           __nv_bfloat16* __restrict__ v_cache, int B, int K, int Lmax) {
  const auto sync = [] { sync_stage(); };
  const gemv_body::StageNormed<WARPS, GEMV_BATCH, decltype(sync)> stage{x, norm_w, eps, K, smem_norm<float>(), sync};
  qkv_body::task<WARPS, QKV_ROWS, GEMV_KCHUNK, GEMV_BATCH>(tile.coord[0], tile.coord[1], w, stage, pos, inv_freq,
                                                            q, k_cache, v_cache, B, K, Lmax, smem_xs<uint4>(),
                                                            smem_res<float>(), smem_sums<float>(), tile.continues,
                                                            sync);
}
