// moe_router: Qwen3-style top-k routing. Task r scores tokens r*ROUTER_TOKENS.. against every expert
// with bf16 tensor-core MMA (fp32 accumulation), takes the softmax over the experts, keeps the TOPK
// largest (ties to the lower expert id) and renormalizes them to sum to one.
#include <cuda_bf16.h>
#include <mma.h>
#ifdef MOE_CLASSIC
#include "classic.h"  // the values this team hard-coded when the layer was first assembled
#else
#include "moe_router.pipelink.h"
#endif

using namespace pl::moe_router;
using namespace nvcuda;

static_assert(ROUTER_TOKENS % 16 == 0, "ROUTER_TOKENS: whole 16-row MMA fragments");
static_assert(ROUTER_EXPERTS_PER_CHUNK == 16 * WARPS, "one 16-expert fragment column per warp");
static_assert(ROUTER_K_CHUNK % 16 == 0 && ROUTER_MAX_EXPERTS % 32 == 0, "router geometry");

constexpr int kTokenFrags = ROUTER_TOKENS / 16;
constexpr int kLdx = ROUTER_K_CHUNK + 8;       // bf16 row pitch of the staged tokens (no bank conflicts)
constexpr int kLdl = ROUTER_MAX_EXPERTS + 4;   // f32 row pitch of the logits
constexpr int kMaxTopk = 8;

extern "C" __device__ void moe_router(pl::Tile tile, const __nv_bfloat16* __restrict__ x,
                                      const __nv_bfloat16* __restrict__ w_router, int* __restrict__ topk_ids,
                                      float* __restrict__ topk_w, int T, int H, int E, int TOPK) {
  __nv_bfloat16* xs = smem_x_chunk<__nv_bfloat16>();
  float* logits = smem_logits<float>();
  const int t0 = tile.coord[0] * ROUTER_TOKENS;
  const int warp = warp_rank();

  for (int e0 = 0; e0 < E; e0 += ROUTER_EXPERTS_PER_CHUNK) {
    const int ew = e0 + 16 * warp;  // this warp's 16 experts
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kTokenFrags];
    for (int f = 0; f < kTokenFrags; ++f) wmma::fill_fragment(acc[f], 0.0f);
    for (int k0 = 0; k0 < H; k0 += ROUTER_K_CHUNK) {
      __syncthreads();  // the previous chunk is consumed
      constexpr int kVecs = ROUTER_K_CHUNK / 8;  // 16-byte vectors per staged row
      for (int v = thread_rank(); v < ROUTER_TOKENS * kVecs; v += THREADS) {
        const int row = v / kVecs, col = (v % kVecs) * 8;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (t0 + row < T && k0 + col < H) val = *reinterpret_cast<const uint4*>(x + (long long)(t0 + row) * H + k0 + col);
        *reinterpret_cast<uint4*>(xs + row * kLdx + col) = val;
      }
      __syncthreads();
      if (ew < E) {
        for (int kk = 0; kk < ROUTER_K_CHUNK && k0 + kk < H; kk += 16) {
          // w_router rows are the B operand in column-major order: B(k, e) = w_router[e, k].
          wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
          wmma::load_matrix_sync(b, w_router + (long long)ew * H + k0 + kk, H);
          for (int f = 0; f < kTokenFrags; ++f) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
            wmma::load_matrix_sync(a, xs + 16 * f * kLdx + kk, kLdx);
            wmma::mma_sync(acc[f], a, b, acc[f]);
          }
        }
      }
    }
    if (ew < E)
      for (int f = 0; f < kTokenFrags; ++f)
        wmma::store_matrix_sync(logits + 16 * f * kLdl + ew, acc[f], kLdl, wmma::mem_row_major);
  }
  __syncthreads();

  // One warp per token: softmax over the experts, then TOPK rounds of a warp arg-max.
  constexpr int kPerLane = ROUTER_MAX_EXPERTS / 32;
  const int lane = pl::lane_index();
  for (int row = warp; row < ROUTER_TOKENS; row += WARPS) {
    const int t = t0 + row;
    if (t >= T) break;
    float v[kPerLane];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      v[j] = e < E ? logits[row * kLdl + e] : -INFINITY;
      mx = fmaxf(mx, v[j]);
    }
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    // TOPK <= kMaxTopk rounds, unrolled so the picks stay in registers; lane k keeps pick k.
    float sum = 0.0f, my_p = 0.0f;
    int my_e = 0;
#pragma unroll
    for (int k = 0; k < kMaxTopk; ++k) {
      if (k >= TOPK) break;
      float best = -INFINITY;
      int best_e = 0x7fffffff;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int e = lane + 32 * j;
        if (v[j] > best || (v[j] == best && e < best_e)) best = v[j], best_e = e;
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, off);
        const int oe = __shfl_xor_sync(0xffffffffu, best_e, off);
        if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
      }
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (lane + 32 * j == best_e) v[j] = -INFINITY;  // taken
      const float p = __expf(best - mx);  // the softmax denominator cancels in the renormalization
      sum += p;
      if (lane == k) my_p = p, my_e = best_e;
    }
    if (lane < TOPK) {
      topk_ids[(long long)t * TOPK + lane] = my_e;
      topk_w[(long long)t * TOPK + lane] = my_p / sum;
    }
  }
}
