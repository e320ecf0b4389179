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

#ifndef MOE_CLASSIC
// A task combines COMBINE_TOKENS tokens over COMBINE_TILE_N columns. A token's TOPK rows are staged into
// shared memory with cp.async, one commit group a token, through a ring of COMBINE_STAGES token slots: the
// next tokens' rows stream while token u is summed, and no register waits for a load. A task's claim, its
// event waits and its picks' loads are a chain of dependent round trips (about 3 us), so a task takes
// several tokens. (Loaded into registers one token a task, the bytes in flight were bounded by the
// registers, 32 KB an SM with the layer kernel's one 4-warp block an SM: at T = 4096 its 4096 tasks ran
// about 120 us after the experts' last tile, about 3.5 us a token; staged, two tokens a task, 89 us.)
static_assert(COMBINE_TILE_N % 8 == 0, "COMBINE_TILE_N: whole 16-byte chunks");
static_assert(COMBINE_STAGES >= 1 && COMBINE_STAGES <= 8, "COMBINE_STAGES: 1..8 token slots");
static_assert(smem_rows_bytes >= COMBINE_STAGES * kMaxTopk * COMBINE_TILE_N * 2, "contract: smem.buffers.rows too small");
static_assert(smem_picks_bytes >= COMBINE_TOKENS * kMaxTopk * 8, "contract: smem.buffers.picks too small");

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

extern "C" __device__ void moe_combine(pl::Tile tile, const bf16* __restrict__ ys, const int* __restrict__ slot,
                                       const int* __restrict__ pair_tile, const float* __restrict__ topk_w, bf16* __restrict__ y,
                                       int T, int H, int TOPK) {
  if (TOPK > kMaxTopk || H % 8 != 0) __trap();  // the contract: TOPK <= 8, H a multiple of 8
  const int t0 = tile.coord[0] * COMBINE_TOKENS, tokens = min(COMBINE_TOKENS, T - t0);
  const int c0 = tile.coord[1] * COMBINE_TILE_N, width = min(H, c0 + COMBINE_TILE_N) - c0;
  bf16* const rows = smem_rows<bf16>();  // [COMBINE_STAGES][kMaxTopk][COMBINE_TILE_N]: token u in slot u % stages
  int* const row_of = smem_picks<int>();  // [COMBINE_TOKENS][kMaxTopk]: ys row of pick k, then its weight
  float* const weight = reinterpret_cast<float*>(row_of + COMBINE_TOKENS * kMaxTopk);
  const int tid = thread_rank();
  for (int i = tid; i < COMBINE_TOKENS * kMaxTopk; i += THREADS) {
    const int u = i / kMaxTopk, k = i % kMaxTopk;
    const bool pick = u < tokens && k < TOPK;  // slot and topk_w: written in this launch, through L2
    row_of[i] = pick ? __ldcg(slot + (long long)(t0 + u) * TOPK + k) : 0;
    weight[i] = pick ? __ldcg(topk_w + (long long)(t0 + u) * TOPK + k) : 0.0f;
  }
  __syncthreads();
  const unsigned rows_at = static_cast<unsigned>(__cvta_generic_to_shared(rows));
  auto stage = [&](int u) {  // token u's rows into its slot, one commit group (empty past the last token)
    if (u < tokens)
      for (int k = 0; k < TOPK; ++k) {
        const bf16* src = ys + (long long)row_of[u * kMaxTopk + k] * H + c0;
        const unsigned dst = rows_at + 2u * ((u % COMBINE_STAGES) * kMaxTopk + k) * COMBINE_TILE_N;
        for (int c = 8 * tid; c < width; c += 8 * THREADS) cp_async16(dst + 2u * c, src + c);
      }
    cp_async_commit();
  };
  for (int u = 0; u < COMBINE_STAGES; ++u) stage(u);
  for (int u = 0; u < tokens; ++u) {
    cp_async_wait<COMBINE_STAGES - 1>();  // groups 0..u landed: COMBINE_STAGES were committed ahead of u
    __syncthreads();                      // token u's rows landed, every thread's part of them
    const bf16* const mine = rows + (u % COMBINE_STAGES) * kMaxTopk * COMBINE_TILE_N;
    bf16* const out = y + (long long)(t0 + u) * H + c0;
    for (int c = 4 * tid; c < width; c += 4 * THREADS) {
      float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int k = 0; k < TOPK; ++k) {
        const uint2 v = *reinterpret_cast<const uint2*>(mine + k * COMBINE_TILE_N + c);
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
        const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
        const float wk = weight[u * kMaxTopk + k];
        acc.x += wk * a.x, acc.y += wk * a.y, acc.z += wk * b.x, acc.w += wk * b.y;
      }
      __nv_bfloat162 o[2] = {__floats2bfloat162_rn(acc.x, acc.y), __floats2bfloat162_rn(acc.z, acc.w)};
      *reinterpret_cast<uint2*>(out + c) = *reinterpret_cast<const uint2*>(o);
    }
    if (u + COMBINE_STAGES < tokens) __syncthreads();  // every thread is done with the slot it refills
    stage(u + COMBINE_STAGES);
  }
  cp_async_wait<0>();  // nothing of this task still lands in the arena when the next task starts
}
#else
// The classic build: what the integrator's hand-written glue launches, one token a block and no shared memory.
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
#endif
