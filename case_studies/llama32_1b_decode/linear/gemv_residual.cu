// gemv_residual: y[b, n] = r[b, n] + sum over k of x[b, k] * W[n, k] for the GEMV_ROWS rows of W of one
// task (an output projection: the residual stream added before the one rounding to bf16).
#include "gemv_residual.pipelink.h"
#include "gemv.cuh"

using namespace pl::gemv_residual;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_residual: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, GEMV_ROWS> * 4, "contract gemv_residual: smem.buffers.sums is too small");

extern "C" __device__ void gemv_residual(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                         const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* r,
                                         __nv_bfloat16* y, int B, int N, int K) {
  gemv_body::rows<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH, true>(
      tile.coord[0] * GEMV_ROWS, w, gemv_body::StageRaw{x, K}, r, y, B, N, K, smem_xs<uint4>(),
      smem_sums<float>(), tile.continues, [] { sync_stage(); });
}
