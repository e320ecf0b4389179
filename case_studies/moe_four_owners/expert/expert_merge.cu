// moe_expert_merge: tile i's expert output rows once all of moe_expert_split's shares of the tile are in:
// ys[row] = bf16(part[0][row] + part[1][row] + ...), the shares with columns only, in share order. A tile
// of one share (all of I) has its ys rows written by the expert's task itself: nothing to add.
#include <cuda_bf16.h>

#include "moe_expert_merge.pipelink.h"

using namespace pl::moe_expert_merge;

extern "C" __device__ void moe_expert_merge(pl::Tile tile, const float* __restrict__ part,
                                            const int* __restrict__ tile_expert, const int* __restrict__ tile_rows,
                                            __nv_bfloat16* __restrict__ ys, int T, int H, int I, int E, int TOPK,
                                            int splits) {
  const int i = tile.coord[0];
  const int e = __ldcg(tile_expert + i);  // written by moe_dispatch in this launch: through L2
  if (e < 0) return;
  const int bm = EXPERT_TILE_M();
  const int blocks = I / 64, per = (blocks + splits - 1) / splits, shares = (blocks + per - 1) / per;
  if (shares == 1) return;  // see expert_share.cuh
  const int rows = __ldcg(tile_rows + i);
  const long long row0 = (long long)i * bm;
  const int tiles = (T * TOPK + bm - 1) / bm + E;  // (32-bit: no 64-bit division routine)
  const long long share = (long long)tiles * bm * H;  // elements of one share
  const int vecs = H / 4;
  constexpr int kBatch = 8;  // shares loaded before any is added: a thread's loads in flight together
  for (int v = thread_rank(); v < rows * vecs; v += THREADS) {
    const long long at = (row0 + v / vecs) * H + 4 * (v % vecs);
    float4 s = __ldcg(reinterpret_cast<const float4*>(part + at));  // written in this launch: through L2
    for (int j0 = 1; j0 < shares; j0 += kBatch) {
      float4 p[kBatch];
#pragma unroll
      for (int q = 0; q < kBatch; ++q)
        if (j0 + q < shares) p[q] = __ldcg(reinterpret_cast<const float4*>(part + (j0 + q) * share + at));
#pragma unroll
      for (int q = 0; q < kBatch; ++q)  // in share order
        if (j0 + q < shares) s.x += p[q].x, s.y += p[q].y, s.z += p[q].z, s.w += p[q].w;
    }
    __nv_bfloat162* y = reinterpret_cast<__nv_bfloat162*>(ys + at);
    y[0] = __floats2bfloat162_rn(s.x, s.y);
    y[1] = __floats2bfloat162_rn(s.z, s.w);
  }
}
