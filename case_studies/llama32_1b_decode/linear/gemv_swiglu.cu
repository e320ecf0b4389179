// gemv_swiglu: the gate/up projection of the MLP with its activation, h[b, n] = silu(gate[b, n]) * up[b, n],
// gate = x W_gate^T and up = x W_up^T. W is stacked: W [2I, K] holds the I gate rows, then the I up rows
// (gate_proj and up_proj concatenated along the output features). Task c owns the outputs n0 .. n0 + C - 1,
// C = SWIGLU_COLS, n0 = C c: its 2C rows of W are gate rows n0 .. n0 + C - 1 and up rows I + n0 .. I + n0 + C - 1,
// walked by gemv.cuh. The fp32 sums meet in shared memory (res); thread C b + c' then writes
// h[b, n0 + c'] = gate / (1 + exp(-gate)) * up, in fp32, rounded once to bf16. The body is swiglu.cuh's,
// shared with gemv_swiglu_normed.
#include "gemv_swiglu.pipelink.h"
#include "swiglu.cuh"

using namespace pl::gemv_swiglu;
constexpr int TASK_ROWS = 2 * SWIGLU_COLS;  // a task's gate rows, then as many up rows
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_swiglu: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, TASK_ROWS> * 4, "contract gemv_swiglu: smem.buffers.sums is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * TASK_ROWS * 4, "contract gemv_swiglu: smem.buffers.res is too small");

extern "C" __device__ void gemv_swiglu(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                       const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ h, int B,
                                       int I, int K) {
  swiglu_body::task<WARPS, TASK_ROWS, GEMV_KCHUNK, GEMV_BATCH, SWIGLU_COLS>(
      tile.coord[0] * SWIGLU_COLS, w, gemv_body::StageRaw{x, K}, h, B, I, K, smem_xs<uint4>(), smem_res<float>(),
      smem_sums<float>(), tile.continues, [] { sync_stage(); });
}
