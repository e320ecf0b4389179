// moe_expert: one tile of the grouped expert GEMMs. Tile i holds EXPERT_TILE_M rows of one expert
// (tile_expert[i]); each row is a token of x (row_token, -1 for padding, zero-filled).
//   phase 1: h = silu(x Wg^T) * (x Wu^T) for the I columns, 64 at a time, kept in shared memory as bf16
//   phase 2: ys = h Wd^T for the H columns, 128 at a time, written as bf16
// The phases are expert_body.cuh's (moe_expert_split runs them over a part of I per task).
#ifdef MOE_CLASSIC
#include "classic.h"
#else
#include "moe_expert.pipelink.h"
#endif

using namespace pl::moe_expert;
constexpr int kHCols = EXPERT_MAX_INTER;  // a task takes every column of I
#include "expert_body.cuh"

using namespace expert_body;
static_assert(kStageElems * 2 * EXPERT_STAGES <= smem_stages_bytes, "contract: smem.buffers.stages too small");
static_assert(BM * kLdh * 2 <= smem_h_bytes, "contract: smem.buffers.h too small");
static_assert(BM * 4 <= smem_tokens_bytes, "contract: smem.buffers.tokens too small");
static_assert(2 * BM * kLdc * 4 <= smem_stages_bytes, "the epilogue reuses the stages");

extern "C" __device__ void moe_expert(pl::Tile tile, const bf16* __restrict__ x, const bf16* __restrict__ w_gate,
                                      const bf16* __restrict__ w_up, const bf16* __restrict__ w_down,
                                      const int* __restrict__ row_token, const int* __restrict__ tile_expert,
                                      const int* __restrict__ tile_rows, bf16* __restrict__ ys, int T, int H, int I, int E,
                                      int TOPK) {
  const int i = tile.coord[0];
  const int e = __ldcg(tile_expert + i);  // written by moe_dispatch in this launch: through L2
  if (e < 0) return;  // past the last used tile
  const int rows = __ldcg(tile_rows + i);
  const long long row0 = (long long)i * BM;
  float* const cg = smem_stages<float>();  // epilogue, after the ring is drained
  const Smem sm{smem_stages<bf16>(), smem_h<bf16>(), smem_tokens<int>(), cg, cg + BM * kLdc};
  load_tokens(sm, row_token, row0, rows);
  gate_up(sm, x, w_gate + (long long)e * I * H, w_up + (long long)e * I * H, H, 0, I);
  down(sm, w_down + (long long)e * H * I, H, I, 0, I, x, [&](int n0, int cols, const float* c) {
    for (int v = thread_rank(); v < rows * (cols / 2); v += THREADS) {
      const int r = v / (cols / 2), col = 2 * (v % (cols / 2));
      *reinterpret_cast<__nv_bfloat162*>(ys + (row0 + r) * H + n0 + col) =
          __floats2bfloat162_rn(c[r * kLdc + col], c[r * kLdc + col + 1]);
    }
  });
}
