// gemv_normed: y[b, n] = sum over k of xn[b, k] * W[n, k], where xn is written in the same launch by
// rmsnorm; the glue starts a task only once every row of xn is in (the wait on normed). xn is staged
// through L2 (never the read-only cache), as gemv.cuh does for every x.
#include "gemv_normed.pipelink.h"
#include "gemv.cuh"

using namespace pl::gemv_normed;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_normed: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, GEMV_ROWS> * 4, "contract gemv_normed: smem.buffers.sums is too small");

extern "C" __device__ void gemv_normed(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                       const __nv_bfloat16* __restrict__ xn, __nv_bfloat16* __restrict__ y, int B,
                                       int N, int K) {
  gemv_body::rows<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH, false>(
      tile.coord[0] * GEMV_ROWS, w, gemv_body::StageRaw{xn, K}, nullptr, y, B, N, K, smem_xs<uint4>(),
      smem_sums<float>(), tile.continues, [] { sync_stage(); });
}
