// moe_combine: y[t, cols] = sum over k of topk_w[t, k] * ys[slot[t, k], cols], fp32 sum, bf16 out.
#include <cuda_bf16.h>
#ifdef MOE_CLASSIC
#include "classic.h"
#else
#include "moe_combine.pipelink.h"
#endif

using namespace pl::moe_combine;
using bf16 = __nv_bfloat16;
constexpr int kMaxTopk = 8;

extern "C" __device__ void moe_combine(pl::Tile tile, const bf16* __restrict__ ys, const int* __restrict__ slot,
                                       const int* __restrict__ pair_tile, const float* __restrict__ topk_w, bf16* __restrict__ y,
                                       int T, int H, int TOPK) {
  const int t = tile.coord[0];
  const int c0 = tile.coord[1] * COMBINE_TILE_N, c1 = min(H, c0 + COMBINE_TILE_N);
  const bf16* src[kMaxTopk];
  float w[kMaxTopk];
#pragma unroll
  for (int k = 0; k < kMaxTopk; ++k) {
    src[k] = k < TOPK ? ys + (long long)slot[(long long)t * TOPK + k] * H : ys;
    w[k] = k < TOPK ? topk_w[(long long)t * TOPK + k] : 0.0f;
  }
  for (int c = c0 + 2 * thread_rank(); c < c1; c += 2 * THREADS) {  // H is even: pairs of columns
    float2 acc = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < kMaxTopk; ++k) {
      if (k < TOPK) {
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src[k] + c));
        acc.x += w[k] * v.x;
        acc.y += w[k] * v.y;
      }
    }
    *reinterpret_cast<__nv_bfloat162*>(y + (long long)t * H + c) = __floats2bfloat162_rn(acc.x, acc.y);
  }
}
