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
  if (H % 4 == 0 && COMBINE_TILE_N % 4 == 0) {
    // kUnroll groups of 4 columns a thread, every k's 8 bytes loaded before any is used: a thread has
    // kUnroll * TOPK loads in flight, a token's row in one pass of the block at H = 2048. (4-byte loads one
    // k at a time left the combine latency-bound at 5 us a token, and in the layer kernel, one block an SM,
    // its 4096 tasks at T = 4096 ran 140 us past the experts' last.)
    constexpr int kUnroll = 4;  // 4-column groups a thread at once: kUnroll * TOPK loads in flight
    for (int c0u = c0 + 4 * thread_rank(); c0u < c1; c0u += kUnroll * 4 * THREADS) {
      uint2 v[kUnroll][kMaxTopk];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0u + u * 4 * THREADS;
#pragma unroll
        for (int k = 0; k < kMaxTopk; ++k)  // written in this launch: through L2
          if (k < TOPK && c < c1) v[u][k] = __ldcg(reinterpret_cast<const uint2*>(src[k] + c));
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0u + u * 4 * THREADS;
        if (c >= c1) break;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < kMaxTopk; ++k) {
          if (k < TOPK) {
            const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v[u][k].x));
            const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v[u][k].y));
            acc.x += w[k] * a.x, acc.y += w[k] * a.y, acc.z += w[k] * b.x, acc.w += w[k] * b.y;
          }
        }
        __nv_bfloat162 out[2] = {__floats2bfloat162_rn(acc.x, acc.y), __floats2bfloat162_rn(acc.z, acc.w)};
        *reinterpret_cast<uint2*>(y + (long long)t * H + c) = *reinterpret_cast<const uint2*>(out);
      }
    }
    return;
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
