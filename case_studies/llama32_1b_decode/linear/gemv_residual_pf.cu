// gemv_residual_pf: gemv_residual, and before the task waits, its rows of W asked of L2 (the prefetch entry).
// gemv_residual: y[b, n] = r[b, n] + sum over k of x[b, k] * W[n, k] for the GEMV_ROWS rows of W of one
// task (an output projection: the residual stream added before the one rounding to bf16).
#include "gemv_residual_pf.pipelink.h"
#include "gemv.cuh"

using namespace pl::gemv_residual_pf;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_residual_pf: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, GEMV_ROWS> * 4, "contract gemv_residual_pf: smem.buffers.sums is too small");

extern "C" __device__ void gemv_residual_pf(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                         const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* r,
                                         __nv_bfloat16* y, int B, int N, int K) {
  gemv_body::rows<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH, true>(
      tile.coord[0] * GEMV_ROWS, w, gemv_body::StageRaw{x, K}, r, y, B, N, K, smem_xs<uint4>(),
      smem_sums<float>(), tile.continues, [] { sync_stage(); });
}

// Before the task waits (for x and r, which other tasks write): every line of its rows of W asked of L2, one
// prefetch a thread per 128 bytes. Nothing waits for them; the entry's loads then find them there.
extern "C" __device__ void gemv_residual_pf_prefetch(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                     const __nv_bfloat16* __restrict__, const __nv_bfloat16* __restrict__,
                                                     __nv_bfloat16* __restrict__, int, int N, int K) {
  const int n0 = tile.coord[0] * GEMV_ROWS, rows = min(GEMV_ROWS, N - n0), lines = (K * 2 + 127) / 128;
  for (int i = thread_rank(); i < rows * lines; i += THREADS) {
    const int r = i / lines, l = i - r * lines;
    const __nv_bfloat16* p = w + (long long)(n0 + r) * K + (long long)l * 64;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
  }
}
