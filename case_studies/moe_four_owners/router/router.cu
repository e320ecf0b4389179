// moe_router: Qwen3-style top-k routing. Task r scores tokens r*ROUTER_TOKENS.. against every expert
// with bf16 tensor-core MMA (mma.sync, fp32 accumulation), takes the softmax over the experts, keeps the TOPK
// largest (ties to the lower expert id) and renormalizes them to sum to one.
// The scores stream K in chunks of ROUTER_K_CHUNK through a ring of ROUTER_STAGES cp.async stages (the
// tokens' chunk and every expert's): a task reads the whole router weight, and at small T one task is
// the layer's critical path, so its loads must be many and in flight together, not one fragment at a time.
// With score_slices = S > 1 the K chunks are cut into S slices: tasks (r, 0..S-1) each score one slice and
// store their fp32 partial logits in score_parts; task (r, S) waits for them (a chain: event `scored`), sums
// the S partials in slice order and picks. One CTA reading the whole 512 KB gate took 40 us whatever T
// (qwen3-30b-a3b, H200): at small T that was the layer's critical path, now cut S ways.
#include <cuda_bf16.h>
#ifdef MOE_CLASSIC
#include "classic.h"  // the values this team hard-coded when the layer was first assembled
#else
#include "moe_router.pipelink.h"
#endif

using namespace pl::moe_router;
using bf16 = __nv_bfloat16;

static_assert(ROUTER_TOKENS % 16 == 0, "ROUTER_TOKENS: whole 16-row MMA fragments");
static_assert(ROUTER_MAX_EXPERTS % (16 * WARPS) == 0, "ROUTER_MAX_EXPERTS: whole pairs of n8 tiles per warp");
static_assert(ROUTER_MAX_EXPERTS % 32 == 0, "ROUTER_MAX_EXPERTS: whole lanes in the top-k");
static_assert(ROUTER_K_CHUNK % 16 == 0 && 128 % ROUTER_K_CHUNK == 0, "ROUTER_K_CHUNK divides H (a multiple of 128)");
static_assert(ROUTER_STAGES >= 2, "a ring needs two stages");

constexpr int kTokenFrags = ROUTER_TOKENS / 16;                 // m16 tiles: tokens
constexpr int kExpertsPerWarp = ROUTER_MAX_EXPERTS / WARPS;
constexpr int kExpertTiles = kExpertsPerWarp / 8;                 // n8 tiles of a warp: experts
constexpr int kLd = ROUTER_K_CHUNK + 8;        // bf16 row pitch of a stage (no bank conflicts)
constexpr int kStageElems = (ROUTER_TOKENS + ROUTER_MAX_EXPERTS) * kLd;  // the tokens' rows, then the experts'
constexpr int kLdl = ROUTER_MAX_EXPERTS + 4;   // f32 row pitch of the logits
constexpr int kMaxTopk = 8;
static_assert(ROUTER_TOKENS * kLdl * 4 <= ROUTER_STAGES * kStageElems * 2, "the logits fit in the ring");
static_assert((kLd * 2) % 16 == 0, "ldmatrix reads 16-byte rows");
// The picking task: the logits, then its slices' partials staged past them (at least one slice's rows).
constexpr int kPickQuads = ROUTER_TOKENS * ROUTER_MAX_EXPERTS / 4 / THREADS;  // float4s of the sum a thread keeps
constexpr int kStagingQuads = (ROUTER_STAGES * kStageElems * 2 - ROUTER_TOKENS * kLdl * 4) / 16;
static_assert(ROUTER_TOKENS * ROUTER_MAX_EXPERTS % (4 * THREADS) == 0, "whole float4s of the logits a thread");
static_assert(kStagingQuads >= ROUTER_TOKENS * ROUTER_MAX_EXPERTS / 4, "a slice's partials fit past the logits");
static_assert((kLdl * 4) % 16 == 0, "float4 rows of the logits");

// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8. Volatile
// with a memory clobber: a stage is read again after the ring comes round, at the same addresses.
__device__ __forceinline__ void ldmatrix_x4(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
// d[16 x 8] += a[16 x 16] b[16 x 8], bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Warp w picks for the task's token rows w, w + WARPS, ...: the softmax over the experts of
// logits[ROUTER_TOKENS][kLdl] (shared memory), then TOPK rounds of a warp arg-max. kRowsPerWarp rows of a
// warp go through each step together, so their chains of dependent shuffles (about 80 a row) interleave.
// Four at a time: eight held the layer kernel's registers (it spilled). (What the picking task's time went
// to at T = 16 was fetching its code, unrolled: see the rounds' loop below.)
constexpr int kRowsPerWarp = 4;
__device__ __forceinline__ void pick_rows(const float* logits, int t0, int first, int lane, int* __restrict__ topk_ids,
                                          float* __restrict__ topk_w, int T, int E, int TOPK) {
  constexpr int kPerLane = ROUTER_MAX_EXPERTS / 32;
  float v[kRowsPerWarp][kPerLane], mx[kRowsPerWarp], sum[kRowsPerWarp], my_p[kRowsPerWarp];
  int my_e[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = first + WARPS * r;
    const bool live = row < ROUTER_TOKENS && t0 + row < T;
    mx[r] = -INFINITY, sum[r] = 0.0f, my_p[r] = 0.0f, my_e[r] = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int e = lane + 32 * j;
      v[r][j] = live && e < E ? logits[row * kLdl + e] : -INFINITY;
      mx[r] = fmaxf(mx[r], v[r][j]);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], off));
  // TOPK rounds; lane k keeps pick k. A loop, not unrolled: the picking task runs once a launch, its code
  // cold in the instruction cache of a kernel that holds every component, and unrolled (4 rows x 8 rounds)
  // it is thousands of straight-line instructions to fetch.
#pragma unroll 1
  for (int k = 0; k < TOPK; ++k) {
    float best[kRowsPerWarp];
    int best_e[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      best[r] = -INFINITY, best_e[r] = 0x7fffffff;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int e = lane + 32 * j;
        if (v[r][j] > best[r] || (v[r][j] == best[r] && e < best_e[r])) best[r] = v[r][j], best_e[r] = e;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float ob = __shfl_xor_sync(0xffffffffu, best[r], off);
        const int oe = __shfl_xor_sync(0xffffffffu, best_e[r], off);
        if (ob > best[r] || (ob == best[r] && oe < best_e[r])) best[r] = ob, best_e[r] = oe;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j)
        if (lane + 32 * j == best_e[r]) v[r][j] = -INFINITY;  // taken
      const float p = __expf(best[r] - mx[r]);  // the softmax denominator cancels in the renormalization
      sum[r] += p;
      if (lane == k) my_p[r] = p, my_e[r] = best_e[r];
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = first + WARPS * r, t = t0 + row;
    if (row < ROUTER_TOKENS && t < T && lane < TOPK) {
      topk_ids[(long long)t * TOPK + lane] = my_e[r];
      topk_w[(long long)t * TOPK + lane] = my_p[r] / sum[r];
    }
  }
}

__device__ __forceinline__ void pick_topk(const float* logits, int t0, int warp, int lane, int* __restrict__ topk_ids,
                                          float* __restrict__ topk_w, int T, int E, int TOPK) {
  for (int first = warp; first < ROUTER_TOKENS && t0 + first < T; first += WARPS * kRowsPerWarp)
    pick_rows(logits, t0, first, lane, topk_ids, topk_w, T, E, TOPK);
}

extern "C" __device__ void moe_router(pl::Tile tile, const bf16* __restrict__ x, const bf16* __restrict__ w_router,
                                      int* __restrict__ topk_ids, float* __restrict__ topk_w,
                                      float* __restrict__ score_parts, int T, int H, int E, int TOPK,
                                      int score_slices) {
  bf16* ring = smem_stages<bf16>();
  float* logits = reinterpret_cast<float*>(ring);  // after the last stage is consumed
  const int t0 = tile.coord[0] * ROUTER_TOKENS;
  const int warp = warp_rank();
  const int lane = pl::lane_index();
  const int slice = tile.coord[1];
  const bool sliced = score_slices > 1;
  if (sliced && slice == score_slices) {
    // The picking task: its slices' partial logits (written by other CTAs in this launch) staged into shared
    // memory with cp.async (through L2), as many slices at once as fit past the logits, then summed in slice
    // order: the same sum whichever CTA ran which slice. (Loaded into registers a few at a time, the picking
    // task was a chain of L2 round trips, ~20 us of the layer's critical path at T = 16.)
    const int rows = min(ROUTER_TOKENS, T - t0), quads = rows * E / 4;  // float4s of a slice's rows; E % 16 == 0
    const float4* const parts = reinterpret_cast<const float4*>(score_parts);
    float4* const staged = reinterpret_cast<float4*>(logits + ROUTER_TOKENS * kLdl);
    const int group = max(1, kStagingQuads / max(quads, 1));  // slices staged at once
    const unsigned staged_at = static_cast<unsigned>(__cvta_generic_to_shared(staged));
    float4 acc[kPickQuads];
#pragma unroll
    for (int k = 0; k < kPickQuads; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < score_slices; s0 += group) {
      const int count = min(group, score_slices - s0);
      for (int s = 0; s < count; ++s) {
        const float4* const src = parts + ((long long)(s0 + s) * T + t0) * (E / 4);
        for (int q = thread_rank(); q < quads; q += THREADS)
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(staged_at + 16u * (s * quads + q)),
                       "l"(src + q) : "memory");
      }
      asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
      __syncthreads();  // every thread's slices landed
      for (int s = 0; s < count; ++s) {
#pragma unroll
        for (int k = 0; k < kPickQuads; ++k) {
          const int q = thread_rank() + k * THREADS;
          if (q < quads) {
            const float4 v = staged[s * quads + q];
            acc[k].x += v.x, acc[k].y += v.y, acc[k].z += v.z, acc[k].w += v.w;
          }
        }
      }
      __syncthreads();  // every thread is done with the staged slices before the next group lands
    }
#pragma unroll
    for (int k = 0; k < kPickQuads; ++k) {
      const int q = thread_rank() + k * THREADS;
      if (q < quads) *reinterpret_cast<float4*>(logits + (q / (E / 4)) * kLdl + 4 * (q % (E / 4))) = acc[k];
    }
    __syncthreads();
    pick_topk(logits, t0, warp, lane, topk_ids, topk_w, T, E, TOPK);
    return;
  }
  // This task's K chunks: all of them, or slice `slice` of score_slices (balanced; an empty one stores zeros).
  const int chunks = H / ROUTER_K_CHUNK;
  const int first = sliced ? chunks * slice / score_slices : 0;
  const int steps = (sliced ? chunks * (slice + 1) / score_slices : chunks) - first;

  // Stage `step`: the tokens' and the experts' columns [k0, k0 + ROUTER_K_CHUNK); rows past T or E are zeros.
  // A thread stages the same rows and 16-byte chunk of every stage: token rows row0 + kRowStep * i of the
  // task's, expert rows row0 + kRowStep * i. Their addresses are one base each and a fixed stride, so a load
  // is an add. (Computed per load, with a division, a 64-bit multiply and a select each, they made the task
  // issue-bound: one warp per scheduler issuing every 3.5 cycles, 57 us a task whatever its tokens. Kept
  // as a pointer per row, they spilled in the layer kernel.)
  constexpr int kVecs = ROUTER_K_CHUNK / 8;
  constexpr int kRowStep = THREADS / kVecs;
  constexpr int kTokenLoads = (ROUTER_TOKENS + kRowStep - 1) / kRowStep;
  constexpr int kExpertLoads = (ROUTER_MAX_EXPERTS + kRowStep - 1) / kRowStep;
  static_assert(THREADS % kVecs == 0, "whole rows per pass of the block");
  const int row0 = thread_rank() / kVecs, chunk = thread_rank() % kVecs;
  const bf16* const xs = x + (long long)(t0 + row0) * H + 8 * chunk;
  const bf16* const ws = w_router + (long long)row0 * H + 8 * chunk;
  const long long stride = (long long)kRowStep * H;
  const unsigned ring_base = static_cast<unsigned>(__cvta_generic_to_shared(ring));
  const unsigned tokens_at = ring_base + 2 * (row0 * kLd + 8 * chunk);
  const unsigned experts_at = tokens_at + 2 * ROUTER_TOKENS * kLd;
  auto load = [&](int step) {
    const unsigned s = 2 * (step % ROUTER_STAGES) * kStageElems;
    const int k0 = (first + step) * ROUTER_K_CHUNK;
#pragma unroll
    for (int i = 0; i < kTokenLoads; ++i) {
      const int row = row0 + kRowStep * i;
      const bool valid = t0 + row < T;
      if (row < ROUTER_TOKENS)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(tokens_at + s + 2 * kRowStep * kLd * i),
                     "l"(valid ? xs + i * stride + k0 : x), "r"(valid ? 16 : 0) : "memory");
    }
#pragma unroll
    for (int i = 0; i < kExpertLoads; ++i) {
      const int row = row0 + kRowStep * i;
      const bool valid = row < E;
      if (row < ROUTER_MAX_EXPERTS)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(experts_at + s + 2 * kRowStep * kLd * i),
                     "l"(valid ? ws + i * stride + k0 : w_router), "r"(valid ? 16 : 0) : "memory");
    }
  };
  // Per k16 slice a warp takes its tokens' A fragments and its experts' B fragments with one ldmatrix each
  // (4 x 8x8), then kTokenFrags x kExpertTiles mma.sync: 16 fragment loads a stage a warp where wmma's were
  // 64 generic ones. Token tiles past T are skipped.
  const int live_frags = min(kTokenFrags, (T - t0 + 15) / 16);
  const unsigned a_at = 2 * (((lane % 8) + 8 * ((lane / 8) % 2)) * kLd + 8 * (lane / 16));
  const unsigned b_at = 2 * ((ROUTER_TOKENS + warp * kExpertsPerWarp + 8 * (lane / 16) + lane % 8) * kLd +
                             8 * ((lane / 8) % 2));
  float acc[kTokenFrags][kExpertTiles][4] = {};
  for (int s = 0; s < ROUTER_STAGES - 1; ++s) {
    if (s < steps) load(s);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for (int step = 0; step < steps; ++step) {
    asm volatile("cp.async.wait_group %0;" ::"n"(ROUTER_STAGES - 2) : "memory");
    __syncthreads();  // stage `step` landed for every thread; stage `step - 1` is free again
    if (step + ROUTER_STAGES - 1 < steps) load(step + ROUTER_STAGES - 1);
    asm volatile("cp.async.commit_group;" ::: "memory");
    const unsigned stage = ring_base + 2 * (step % ROUTER_STAGES) * kStageElems;
#pragma unroll
    for (int kk = 0; kk < ROUTER_K_CHUNK; kk += 16) {
      unsigned a[kTokenFrags][4];
#pragma unroll
      for (int f = 0; f < kTokenFrags; ++f)
        if (f < live_frags) ldmatrix_x4(stage + a_at + 2 * (16 * f * kLd + kk), a[f]);
#pragma unroll
      for (int p = 0; p < kExpertTiles / 2; ++p) {
        // B(k, e) = w_router[e, k]: the experts' rows, K-contiguous, are the col-major B of two n8 tiles
        unsigned b[4];
        ldmatrix_x4(stage + b_at + 2 * (16 * p * kLd + kk), b);
#pragma unroll
        for (int f = 0; f < kTokenFrags; ++f) {
          if (f < live_frags) {
            mma_16816(acc[f][2 * p], a[f], b[0], b[1]);
            mma_16816(acc[f][2 * p + 1], a[f], b[2], b[3]);
          }
        }
      }
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  if (sliced) {  // this slice's partial logits, [slice][t][e] fp32, for the picking task
#pragma unroll
    for (int f = 0; f < kTokenFrags; ++f) {
#pragma unroll
      for (int n = 0; n < kExpertTiles; ++n) {
        const int row = 16 * f + lane / 4, e = warp * kExpertsPerWarp + 8 * n + 2 * (lane % 4);
        if (e >= E) continue;  // E is a multiple of 16: e and e + 1 are both in or both out
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int t = t0 + row + 8 * h;
          if (t < T)
            __stcg(reinterpret_cast<float2*>(score_parts + ((long long)slice * T + t) * E + e),
                   make_float2(acc[f][n][2 * h], acc[f][n][2 * h + 1]));
        }
      }
    }
    return;
  }
  __syncthreads();  // every warp is done with the ring: the logits take its place
#pragma unroll
  for (int f = 0; f < kTokenFrags; ++f) {
#pragma unroll
    for (int n = 0; n < kExpertTiles; ++n) {  // d[0..1]: token row lane / 4, d[2..3]: 8 rows below
      const int row = 16 * f + lane / 4, e = warp * kExpertsPerWarp + 8 * n + 2 * (lane % 4);
      logits[row * kLdl + e] = acc[f][n][0], logits[row * kLdl + e + 1] = acc[f][n][1];
      logits[(row + 8) * kLdl + e] = acc[f][n][2], logits[(row + 8) * kLdl + e + 1] = acc[f][n][3];
    }
  }
  __syncthreads();

  pick_topk(logits, t0, warp, lane, topk_ids, topk_w, T, E, TOPK);
}
