// The integrator's glue for the classic build, written by hand when the layer was first assembled:
// one persistent kernel (the same schedule pipelink generates) and the four components as four
// separate kernels. Every team's constant it depends on is copied in below; nothing checks them.
#include <cuda_bf16.h>
#include "classic_common.h"

using bf16 = __nv_bfloat16;

namespace agreed {  // the values the teams announced at integration time
constexpr int ROUTER_TOKENS = 32;
constexpr int DISPATCH_TOKENS = 64;
constexpr int EXPERT_TILE_M = 32;
constexpr int COMBINE_TILE_N = 2048;
}  // namespace agreed

// The router team added a K-sliced mode (score_parts, score_slices); this glue keeps one task a token block.
extern "C" __device__ void moe_router(pl::Tile, const bf16*, const bf16*, int*, float*, float*, int, int, int, int, int);
extern "C" __device__ void moe_dispatch(pl::Tile, const int*, int*, int*, int*, int*, int*, int, int, int);
extern "C" __device__ void moe_expert(pl::Tile, const bf16*, const bf16*, const bf16*, const bf16*, const int*,
                                      const int*, const int*, bf16*, int, int, int, int, int);
extern "C" __device__ void moe_combine(pl::Tile, const bf16*, const int*, const int*, const float*, bf16*, int, int, int);

struct MoeArgs {
  const bf16 *x, *w_router, *w_gate, *w_up, *w_down;
  int *topk_ids, *pair_tile, *slot, *row_token, *tile_expert, *tile_rows;
  float* topk_w;
  bf16 *ys, *y;
  int T, H, I, E, TOPK;
};

__device__ __forceinline__ pl::Tile tile_of(int c0, int c1) {
  pl::Tile t;
  t.coord[0] = c0, t.coord[1] = c1, t.coord[2] = 0, t.linear = 0, t.stage = 0, t.iteration = 0;
  return t;
}

__device__ __forceinline__ void wait_at_least(const unsigned* p, unsigned count) {
  while (true) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    if (v >= count) return;
    __nanosleep(64);
  }
}

// counters (zeroed by the host before each launch): [0] task claims, [1] routed,
// [2, 2 + dispatch tasks) table, then rows[tiles], then done[tiles], then placed.
extern "C" __global__ void __maxnreg__(128) moe_classic_fused(MoeArgs a, unsigned* counters) {
  __shared__ unsigned task_s;
  const int n_router = (a.T + agreed::ROUTER_TOKENS - 1) / agreed::ROUTER_TOKENS;
  const int n_dispatch = (a.T + agreed::DISPATCH_TOKENS - 1) / agreed::DISPATCH_TOKENS;
  const int n_tiles = (a.T * a.TOPK + agreed::EXPERT_TILE_M - 1) / agreed::EXPERT_TILE_M + a.E;
  const int n_col = (a.H + agreed::COMBINE_TILE_N - 1) / agreed::COMBINE_TILE_N;
  const int n_combine = a.T * n_col;
  unsigned* const routed = counters + 1;
  unsigned* const table = counters + 2;
  unsigned* const rows = table + n_dispatch;
  unsigned* const done = rows + n_tiles;
  unsigned* const placed = done + n_tiles;
  const unsigned total = n_router + n_dispatch + n_tiles + n_combine;
  while (true) {
    if (threadIdx.x == 0) task_s = atomicAdd(counters, 1u);
    __syncthreads();
    const unsigned task = task_s;
    __syncthreads();
    if (task >= total) return;
    if (task < (unsigned)n_router) {
      const int r = task;
      moe_router(tile_of(r, 0), a.x, a.w_router, a.topk_ids, a.topk_w, nullptr, a.T, a.H, a.E, a.TOPK, 1);
      __syncthreads();
      if (threadIdx.x == 0) __threadfence(), atomicAdd(routed, 1u);
    } else if (task < (unsigned)(n_router + n_dispatch)) {
      const int d = task - n_router;
      if (threadIdx.x == 0) wait_at_least(routed, n_router);
      __syncthreads();
      moe_dispatch(tile_of(d, 0), a.topk_ids, a.pair_tile, a.slot, a.row_token, a.tile_expert, a.tile_rows, a.T,
                   a.E, a.TOPK);
      __syncthreads();
      __threadfence();
      if (threadIdx.x == 0) atomicAdd(table + d, 1u), atomicAdd(placed, 1u);
      for (int p = threadIdx.x; p < agreed::DISPATCH_TOKENS * a.TOPK; p += blockDim.x) {
        const int tile = a.pair_tile[(long long)d * agreed::DISPATCH_TOKENS * a.TOPK + p];
        if (tile >= 0) atomicAdd(rows + tile, 1u);
      }
    } else if (task < (unsigned)(n_router + n_dispatch + n_tiles)) {
      const int i = task - n_router - n_dispatch;
      if (threadIdx.x == 0) {
        wait_at_least(table, 1u);
        wait_at_least(rows + i, (unsigned)a.tile_rows[i]);
      }
      __syncthreads();
      moe_expert(tile_of(i, 0), a.x, a.w_gate, a.w_up, a.w_down, a.row_token, a.tile_expert, a.tile_rows, a.ys, a.T,
                 a.H, a.I, a.E, a.TOPK);
      __syncthreads();
      if (threadIdx.x == 0) __threadfence(), atomicAdd(done + i, 1u);
    } else {
      const int c = task - n_router - n_dispatch - n_tiles;
      const int t = c / n_col;
      if (threadIdx.x == 0) {
        wait_at_least(placed, n_dispatch);  // pair_tile is written by the dispatch tasks
        for (int k = 0; k < a.TOPK; ++k) wait_at_least(done + a.pair_tile[(long long)t * a.TOPK + k], 1u);
      }
      __syncthreads();
      moe_combine(tile_of(t, c % n_col), a.ys, a.slot, a.pair_tile, a.topk_w, a.y, a.T, a.H, a.TOPK);
    }
  }
}

// The same components as four kernels, one task per block, ordered by the stream.
extern "C" __global__ void __maxnreg__(128) moe_classic_router(MoeArgs a) {
  moe_router(tile_of(blockIdx.x, 0), a.x, a.w_router, a.topk_ids, a.topk_w, nullptr, a.T, a.H, a.E, a.TOPK, 1);
}
extern "C" __global__ void __maxnreg__(128) moe_classic_dispatch(MoeArgs a) {
  moe_dispatch(tile_of(blockIdx.x, 0), a.topk_ids, a.pair_tile, a.slot, a.row_token, a.tile_expert, a.tile_rows,
               a.T, a.E, a.TOPK);
}
extern "C" __global__ void __maxnreg__(128) moe_classic_expert(MoeArgs a) {
  moe_expert(tile_of(blockIdx.x, 0), a.x, a.w_gate, a.w_up, a.w_down, a.row_token, a.tile_expert, a.tile_rows,
             a.ys, a.T, a.H, a.I, a.E, a.TOPK);
}
extern "C" __global__ void __maxnreg__(128) moe_classic_combine(MoeArgs a) {
  moe_combine(tile_of(blockIdx.x, blockIdx.y), a.ys, a.slot, a.pair_tile, a.topk_w, a.y, a.T, a.H, a.TOPK);
}
