// qkv_rope_normed_ring: qkv_rope_normed (qkv_rope_normed.cu) with W_qkv through ring.cuh's two-slot
// shared-memory ring: the prefetch entry starts the task's bulk copies of its first 8 rows before the task waits
// (and, under static dispatch, while the CTA's previous task of the call runs).
#include "qkv_rope_normed_ring.pipelink.h"
#include "qkv_rope.cuh"
#include "ring.cuh"

using namespace pl::qkv_rope_normed_ring;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract qkv_rope_normed_ring: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, QKV_ROWS> * 4, "contract qkv_rope_normed_ring: smem.buffers.sums is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * QKV_ROWS * 4, "contract qkv_rope_normed_ring: smem.buffers.res is too small");
static_assert(smem_norm_bytes >= (WARPS + 1) * GEMV_BATCH * 4,
              "contract qkv_rope_normed_ring: smem.buffers.norm is too small");
static_assert(smem_ring_bytes >= 2 * ring_body::kRingRows * GEMV_KCHUNK * 2,
              "contract qkv_rope_normed_ring: smem.buffers.ring is too small");


extern "C" __device__ void qkv_rope_normed_ring_prefetch(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                         const __nv_bfloat16* __restrict__,
                                                         const __nv_bfloat16* __restrict__, float,
                                                         const int* __restrict__, const float* __restrict__,
                                                         __nv_bfloat16* __restrict__, __nv_bfloat16* __restrict__,
                                                         __nv_bfloat16* __restrict__, int, int K, int) {
  const int hd = tile.coord[0], j = tile.coord[1];
  ring_body::fill<QKV_ROWS, GEMV_KCHUNK>(w, K, [=](int i) { return qkv_body::row_of<QKV_ROWS>(hd, j, i); },
                                          smem_ring<__nv_bfloat16>(), mbar_loaded(),
                                          tile.iteration);
}

extern "C" __device__ void qkv_rope_normed_ring(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                const __nv_bfloat16* __restrict__ x,
                                                const __nv_bfloat16* __restrict__ norm_w, float eps,
                                                const int* __restrict__ pos, const float* __restrict__ inv_freq,
                                                __nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k_cache,
                                                __nv_bfloat16* __restrict__ v_cache, int B, int K, int Lmax) {
  const auto sync = [] { sync_stage(); };
  const gemv_body::StageNormed<WARPS, GEMV_BATCH, decltype(sync)> stage{x, norm_w, eps, K, smem_norm<float>(), sync};
  const auto wsrc = ring_body::source<QKV_ROWS, GEMV_KCHUNK>(w, K, smem_ring<__nv_bfloat16>(), mbar_loaded(),
                                                               tile.iteration);
  qkv_body::task_from<WARPS, QKV_ROWS, GEMV_KCHUNK, GEMV_BATCH>(tile.coord[0], tile.coord[1], wsrc, stage, pos,
                                                                 inv_freq, q, k_cache, v_cache, B, K, Lmax,
                                                                 smem_xs<uint4>(), smem_res<float>(), smem_sums<float>(),
                                                                 tile.continues, sync);
}
