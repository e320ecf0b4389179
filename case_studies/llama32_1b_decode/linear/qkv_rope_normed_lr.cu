// qkv_rope_normed_lr: qkv_rope_normed (qkv_rope_normed.cu) with W_qkv through the kernel's loader ring: the load
// entry, run by the loader warp ahead of the task's waits, copies the task's rows into the ring, QKV_RING_K columns a
// slot; the entry multiplies each slot as it lands (gemv.cuh's rows_ring).
#include "qkv_rope_normed_lr.pipelink.h"
#include "qkv_rope.cuh"

using namespace pl::qkv_rope_normed_lr;
using Ring = gemv_body::WLoaderRing<QKV_ROWS, QKV_RING_K>;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract qkv_rope_normed_lr: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, QKV_ROWS> * 4, "contract qkv_rope_normed_lr: smem.buffers.sums is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * QKV_ROWS * 4, "contract qkv_rope_normed_lr: smem.buffers.res is too small");
static_assert(smem_norm_bytes >= (WARPS + 1) * GEMV_BATCH * 4, "contract qkv_rope_normed_lr: smem.buffers.norm is too small");
static_assert(QKV_ROWS * QKV_RING_K * 2 == Ring::kSlotBytes, "contract qkv_rope_normed_lr: loader.slot_bytes is not the slot's");

extern "C" __device__ void qkv_rope_normed_lr_load(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                   const __nv_bfloat16* __restrict__,
                                                   const __nv_bfloat16* __restrict__ norm_w, float,
                                                   const int* __restrict__ pos, const float* __restrict__ inv_freq,
                                                   __nv_bfloat16* __restrict__, __nv_bfloat16* __restrict__,
                                                   __nv_bfloat16* __restrict__, int B, int K, int) {
  gemv_body::norm_w_ahead(tile, norm_w, K, LR_L2_ASKS());
  gemv_body::constant_ahead(tile, pos, (unsigned)B * 4u, LR_L2_ASKS());  // the epilogue's RoPE reads both
  gemv_body::constant_ahead(tile, inv_freq, 32u * 4u, LR_L2_ASKS());
  // tasks in the grid's row-major order (contract: [48, 64 // QKV_ROWS])
  gemv_body::load_slots<QKV_ROWS, QKV_RING_K, GEMV_BATCH>(tile, w, tile.coord[0] * (64 / QKV_ROWS) + tile.coord[1],
                                                      B, K, LR_L2_ASKS());
}

extern "C" __device__ void qkv_rope_normed_lr(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                              const __nv_bfloat16* __restrict__ x,
                                              const __nv_bfloat16* __restrict__ norm_w, float eps,
                                              const int* __restrict__ pos, const float* __restrict__ inv_freq,
                                              __nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k_cache,
                                              __nv_bfloat16* __restrict__ v_cache, int B, int K, int Lmax) {
  const auto sync = [] { sync_stage(); };
  const gemv_body::StageNormed<WARPS, GEMV_BATCH, decltype(sync)> stage{x, norm_w, eps, K, smem_norm<float>(), sync,
      (LR_L2_ASKS() & gemv_body::kKeepNormW) != 0};
  qkv_body::task_from<WARPS, QKV_ROWS, GEMV_KCHUNK, GEMV_BATCH>(tile.coord[0], tile.coord[1], Ring{tile}, stage, pos,
                                                                 inv_freq, q, k_cache, v_cache, B, K, Lmax,
                                                                 smem_xs<uint4>(), smem_res<float>(), smem_sums<float>(),
                                                                 tile.continues, sync);
}
