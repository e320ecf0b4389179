// moe_expert_split: task (i, j) is share j of expert tile i: expert_body.cuh's two phases over the share's
// columns [c0, c1) of I (ceil_div(I / 64, splits) blocks of 64 per share, the last shares possibly empty),
// the share's fp32 contribution to every output column of the tile's routed rows stored to part[j], and
// moe_expert_merge adds the shares up; a share of all I columns stores the tile's bf16 ys rows instead. Few tokens route a few rows to each expert: split this way, every
// touched expert's weights stream through `splits` CTAs at once rather than one.
#include "moe_expert_split.pipelink.h"

using namespace pl::moe_expert_split;
constexpr int kHCols = EXPERT_SHARE_MAX;  // a share is at most this wide (the launcher picks splits so)
#include "expert_body.cuh"
#include "expert_share.cuh"

using namespace expert_body;
static_assert(kStageElems * 2 * EXPERT_STAGES <= smem_stages_bytes, "contract: smem.buffers.stages too small");
static_assert(BM * kLdh * 2 <= smem_h_bytes, "contract: smem.buffers.h too small");
static_assert(BM * 4 <= smem_tokens_bytes, "contract: smem.buffers.tokens too small");
static_assert(2 * BM * kLdc * 4 <= smem_stages_bytes, "the epilogue reuses the stages");
static_assert(kN % 4 == 0 && (kLdc * 4) % 16 == 0, "16-byte rows of the fp32 epilogue (64-column blocks)");
static_assert(EXPERT_SHARE_MAX % kN == 0 && EXPERT_SHARE_MAX <= EXPERT_MAX_INTER, "EXPERT_SHARE_MAX: whole blocks of 64");

extern "C" __device__ void moe_expert_split(pl::Tile tile, const bf16* __restrict__ x, const bf16* __restrict__ w_gate,
                                            const bf16* __restrict__ w_up, const bf16* __restrict__ w_down,
                                            const int* __restrict__ row_token, const int* __restrict__ tile_expert,
                                            const int* __restrict__ tile_rows, float* __restrict__ part, bf16* __restrict__ ys,
                                            int T, int H, int I, int E, int TOPK, int splits) {
  const int i = tile.coord[0], j = tile.coord[1];
  ExpertShare share;
  if (!expert_share(i, j, tile_expert, I, splits, EXPERT_SHARE_MAX, share)) return;
  const int e = share.expert, c0 = share.c0, c1 = share.c1;
  const int rows = __ldcg(tile_rows + i);  // written by moe_dispatch in this launch: through L2
  const long long row0 = (long long)i * BM;
  const long long total = (long long)((T * TOPK + BM - 1) / BM + E) * BM;  // rows of one share's part
  float* const out = part + ((long long)j * total + row0) * H;
  bf16* const out_ys = ys + row0 * H;
  const bool alone = share.alone;
  float* const cg = smem_stages<float>();  // epilogue, after the ring is drained
  const Smem sm{smem_stages<bf16>(), smem_h<bf16>(), smem_tokens<int>(), cg, cg + BM * kLdc};
  load_tokens(sm, row_token, row0, rows);
  gate_up(sm, x, w_gate + (long long)e * I * H, w_up + (long long)e * I * H, H, c0, c1);
  down(sm, w_down + (long long)e * H * I, H, I, c0, c1, x, [=](int n0, int cols, const float* c) {
    for (int v = thread_rank(); v < rows * (cols / 4); v += THREADS) {
      const int r = v / (cols / 4), col = 4 * (v % (cols / 4));
      const float4 s = *reinterpret_cast<const float4*>(c + r * kLdc + col);
      if (alone) {
        __nv_bfloat162* y = reinterpret_cast<__nv_bfloat162*>(out_ys + (long long)r * H + n0 + col);
        y[0] = __floats2bfloat162_rn(s.x, s.y);
        y[1] = __floats2bfloat162_rn(s.z, s.w);
      } else {
        __stcg(reinterpret_cast<float4*>(out + (long long)r * H + n0 + col), s);  // read by another CTA: past L1
      }
    }
  });
}
