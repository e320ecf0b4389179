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
  // kUnroll vectors a thread at once, each share's loads issued before any is added: a thread keeps
  // kUnroll * shares 16-byte loads in flight. (One vector at a time, the merge was latency-bound: 96 us a
  // task at T = 1024, longer than the expert tasks it waited for.)
  constexpr int kUnroll = 4;
  const int n = rows * vecs;
  for (int v0 = thread_rank(); v0 < n; v0 += kUnroll * THREADS) {
    long long at[kUnroll];
    float4 s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * THREADS;
      at[u] = (row0 + v / vecs) * H + 4 * (v % vecs);
      if (v < n) s[u] = __ldcg(reinterpret_cast<const float4*>(part + at[u]));  // written in this launch: L2
    }
    for (int j = 1; j < shares; ++j) {  // in share order
      float4 p[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (v0 + u * THREADS < n) p[u] = __ldcg(reinterpret_cast<const float4*>(part + j * share + at[u]));
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (v0 + u * THREADS < n) s[u].x += p[u].x, s[u].y += p[u].y, s[u].z += p[u].z, s[u].w += p[u].w;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (v0 + u * THREADS < n) {
        __nv_bfloat162* y = reinterpret_cast<__nv_bfloat162*>(ys + at[u]);
        y[0] = __floats2bfloat162_rn(s[u].x, s[u].y);
        y[1] = __floats2bfloat162_rn(s[u].z, s[u].w);
      }
    }
  }
}
