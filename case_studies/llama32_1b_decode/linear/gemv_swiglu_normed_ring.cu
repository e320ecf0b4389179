// gemv_swiglu_normed_ring: gemv_swiglu_normed (gemv_swiglu_normed.cu) with W through ring.cuh's two-slot
// shared-memory ring: the prefetch entry starts the task's bulk copies of its 8 gate rows before the task
// waits (its up rows stream from memory in the same pass) (and, under static dispatch, while the CTA's previous task of the call runs).
#include "gemv_swiglu_normed_ring.pipelink.h"
#include "ring.cuh"
#include "swiglu.cuh"

using namespace pl::gemv_swiglu_normed_ring;
constexpr int TASK_ROWS = 2 * SWIGLU_COLS;  // a task's gate rows, then as many up rows
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_swiglu_normed_ring: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, TASK_ROWS> * 4, "contract gemv_swiglu_normed_ring: smem.buffers.sums is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * TASK_ROWS * 4, "contract gemv_swiglu_normed_ring: smem.buffers.res is too small");
static_assert(smem_norm_bytes >= (WARPS + 1) * GEMV_BATCH * 4,
              "contract gemv_swiglu_normed_ring: smem.buffers.norm is too small");
static_assert(smem_ring_bytes >= 2 * ring_body::kRingRows * GEMV_KCHUNK * 2,
              "contract gemv_swiglu_normed_ring: smem.buffers.ring is too small");


extern "C" __device__ void gemv_swiglu_normed_ring_prefetch(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                            const __nv_bfloat16* __restrict__,
                                                            const __nv_bfloat16* __restrict__, float,
                                                            __nv_bfloat16* __restrict__, int, int I, int K) {
  const int n0 = tile.coord[0] * SWIGLU_COLS;
  ring_body::fill<TASK_ROWS, GEMV_KCHUNK>(w, K, [=](int i) { return swiglu_body::row_of<SWIGLU_COLS>(n0, I, i); },
                                          smem_ring<__nv_bfloat16>(), mbar_loaded(),
                                          tile.iteration);
}

extern "C" __device__ void gemv_swiglu_normed_ring(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                   const __nv_bfloat16* __restrict__ x,
                                                   const __nv_bfloat16* __restrict__ norm_w, float eps,
                                                   __nv_bfloat16* __restrict__ h, int B, int I, int K) {
  const auto sync = [] { sync_stage(); };
  const gemv_body::StageNormed<WARPS, GEMV_BATCH, decltype(sync)> stage{x, norm_w, eps, K, smem_norm<float>(), sync};
  const auto wsrc = ring_body::source<TASK_ROWS, GEMV_KCHUNK>(w, K, smem_ring<__nv_bfloat16>(), mbar_loaded(),
                                                               tile.iteration);
  swiglu_body::task_from<WARPS, TASK_ROWS, GEMV_KCHUNK, GEMV_BATCH, SWIGLU_COLS>(
      tile.coord[0] * SWIGLU_COLS, wsrc, stage, h, B, I, K, smem_xs<uint4>(), smem_res<float>(), smem_sums<float>(),
      tile.continues, sync);
}
