// gemv_residual_ring: gemv_residual (gemv_residual.cu) with W through ring.cuh's two-slot shared-memory ring:
// the prefetch entry starts the task's bulk copies before the task waits for its input (and, under static
// dispatch, while the CTA's previous task of the call runs); the entry reads the first K chunk of its first 8 rows from the slot.
#include "gemv_residual_ring.pipelink.h"
#include "ring.cuh"

using namespace pl::gemv_residual_ring;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_residual_ring: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, GEMV_ROWS> * 4, "contract gemv_residual_ring: smem.buffers.sums is too small");
static_assert(smem_ring_bytes >= 2 * ring_body::kRingRows * GEMV_KCHUNK * 2, "contract gemv_residual_ring: smem.buffers.ring is too small");


extern "C" __device__ void gemv_residual_ring_prefetch(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                       const __nv_bfloat16* __restrict__,
                                                       const __nv_bfloat16* __restrict__, __nv_bfloat16* __restrict__,
                                                       int, int N, int K) {
  const int n0 = tile.coord[0] * GEMV_ROWS;
  ring_body::fill<GEMV_ROWS, GEMV_KCHUNK>(w, K, [=](int i) { return n0 + i < N ? n0 + i : -1; },
                                          smem_ring<__nv_bfloat16>(), mbar_loaded(), tile.iteration);
}

extern "C" __device__ void gemv_residual_ring(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                              const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* r,
                                              __nv_bfloat16* y, int B, int N, int K) {
  const auto wsrc = ring_body::source<GEMV_ROWS, GEMV_KCHUNK>(w, K, smem_ring<__nv_bfloat16>(), mbar_loaded(),
                                                               tile.iteration);
  gemv_body::rows_src<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH, true>(
      tile.coord[0] * GEMV_ROWS, wsrc, gemv_body::StageRaw{x, K}, r, y, B, N, K, smem_xs<uint4>(), smem_sums<float>(),
      tile.continues, [] { sync_stage(); });
}
