// gemv_swiglu: the gate/up projection of the MLP with its activation, h[b, n] = silu(gate[b, n]) * up[b, n],
// gate = x W_gate^T and up = x W_up^T. W is stacked: W [2I, K] holds the I gate rows, then the I up rows
// (gate_proj and up_proj concatenated along the output features). Task c owns the outputs n0 .. n0 + 3,
// n0 = 4c: its 8 rows of W are gate rows n0 .. n0 + 3 and up rows I + n0 .. I + n0 + 3, one per warp,
// walked by gemv.cuh. The fp32 sums meet in shared memory (res); thread 4b + c' then writes
// h[b, n0 + c'] = gate / (1 + exp(-gate)) * up, in fp32, rounded once to bf16.
#include "gemv_swiglu.pipelink.h"
#include "gemv.cuh"

using namespace pl::gemv_swiglu;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_swiglu: smem.buffers.xs is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * GEMV_ROWS * 4, "contract gemv_swiglu: smem.buffers.res is too small");
static_assert(GEMV_ROWS == 2 * SWIGLU_COLS && WARPS == GEMV_ROWS,
              "gemv_swiglu: a task is SWIGLU_COLS gate rows and as many up rows, one per warp");

extern "C" __device__ void gemv_swiglu(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                       const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ h, int B,
                                       int I, int K) {
  const int n0 = tile.coord[0] * SWIGLU_COLS;
  float* res = smem_res<float>();  // [GEMV_BATCH][GEMV_ROWS] fp32 sums of one batch group
  const int t = thread_rank();
  gemv_body::rows_with<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH>(
      w, x, B, K, smem_xs<uint4>(),
      [=](int i) {
        const int n = n0 + (i < SWIGLU_COLS ? i : i - SWIGLU_COLS);
        return n < I ? (i < SWIGLU_COLS ? n : I + n) : -1;
      },
      [=](int i, int, int b, float s) { res[b * GEMV_ROWS + i] = s; },
      [=](int bg, int nb) {
        sync_stage();  // every warp's sums are in res
        if (t < nb * SWIGLU_COLS) {
          const int b = t / SWIGLU_COLS, c = t % SWIGLU_COLS, n = n0 + c;
          if (n < I) {
            const float g = res[b * GEMV_ROWS + c], u = res[b * GEMV_ROWS + SWIGLU_COLS + c];
            h[(long long)(bg + b) * I + n] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
          }
        }
        sync_stage();  // every thread has read res before the next batch group (or task) writes it
      },
      [] { sync_stage(); });
}
