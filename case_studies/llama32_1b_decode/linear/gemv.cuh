// The body the gemv components share: y[b, n] = sum over k of x[b, k] * W[n, k] (+ r[b, n]), bf16 in
// and out, fp32 accumulation, for the ROWS rows of W that start at n0.
//
// The products run on the tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate): W's rows are the
// 16 rows of the A operand, the batch rows of x the 8 columns of B (batch 1 leaves 7 of them zero, which
// costs nothing: the walk is bound by reading W). No bf16 is unpacked and no scalar fma runs, which is what
// bounded the earlier scalar walk (about 4 instructions per fma). The sum over k does not care in which
// order k is visited, so every lane loads whole 16-byte vectors of W (8 consecutive k of one row) and of x,
// and both operands use the same permutation of k within a 32-wide block: lane (g, q) holds k = 8q .. 8q+7
// of the block, elements 0-3 for the block's first mma and 4-7 for its second.
//
// K goes in chunks of KCHUNK columns; a chunk's 32-wide blocks are dealt round-robin to the WARPS warps.
// Every lane first issues all its 16-byte loads of W for the chunk (streamed past L1: each element of W is
// read once), then the block stages the chunk of up to BATCH rows of x in shared memory (cp.async through L2,
// all of a thread's copies in flight at once: x may have been written by another CTA in this launch), meets
// at the named barrier, and every warp runs its blocks' mmas (two accumulators, so the mmas form two
// dependency chains, not one).
// After the last chunk the warps' partial sums meet in shared memory (`sums`) and are added in warp order.
// A batch larger than BATCH walks W again per group of BATCH rows.
//
// Every task of a call reads the same x. When all of it fits in xs (B <= BATCH and the K chunks of the B
// rows within BATCH * KCHUNK) it stays there: the CTA's first task of the call stages all of it (and runs
// the stage's prologue, e.g. the norm), and a task that continues the call on the CTA (`pl::Tile`'s
// `continues`: no other task ran there since) skips both and starts with its loads of W. In a decode step
// that is every task but a CTA's first of each call, so the per-task chain is W's loads, the mmas and the
// reduction. Only W (constant for the launch) takes the read-only path
// (ld.global.nc); x and r, which other CTAs of a fused kernel write, are read through L2 (cp.async.cg,
// ld.global.cg).
//
// rows_from leaves the task's rows and its epilogue to the component: which row of W each local row is
// (qkv_rope pairs the rotary halves of a head in one task, gemv_swiglu pairs gate and up rows), and what
// becomes of the fp32 sums (rotated, gated, or reduced to an argmax through shared memory). The stage is
// the component's too: StageRaw copies x as it is, StageNormed stages RMSNorm(x) computed on the fly (the
// *_normed components: no separate norm task, no hand-off).
#pragma once
#include <cuda_bf16.h>
#include <pipelink/component.h>  // pl::Tile, pl::ring

namespace gemv_body {

using bf16 = __nv_bfloat16;

// W's 16-byte loads: past L1, 256 bytes asked of DRAM per request (a warp's load covers 64 bytes of each of 8
// rows; the other warps of the pass take the rest of those lines), and first out of L2 (evict_first: W is
// read once a step, while the activations, the event counters and a short context's KV cache are read
// again). Measured on the H200 (results/l2_hints_ab_2026-12-03.json): the step 968.5 -> 951.8 us with the
// 256-byte size, 944.3 with evict_first too (B = 1, ctx 1024).
__device__ __forceinline__ uint4 load_stream(const bf16* p) {
  uint4 v;
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// A stage says what goes into shared memory for x: stage.begin(bg, nb) before each group of batch rows, row(b)
// batch row b of x as it is in global memory (copied to shared memory by cp.async, see stage_rows), and, where
// kTransforms, apply(b, v, raw, c) the staged form of the v-th 16-byte vector of row b (computed in place), c the
// stage's constant for vector v (constant(v): StageNormed's norm_w, loaded before the copies are awaited). Where
// kComputed, x is not copied at all: column(bg, nb, v, out) computes the v-th vector of rows bg .. bg + nb - 1
// and hands each to out(b, x) (gemv_residual_lr_merged's stage merges attention's split states into o). Staging x as it is:
struct StageRaw {
  static constexpr bool kTransforms = false, kComputed = false;
  const bf16* x;
  int K;
  __device__ __forceinline__ void begin(int, int) const {}
  __device__ __forceinline__ const bf16* row(int b) const { return x + (long long)b * K; }
  __device__ __forceinline__ uint4 constant(int) const { return make_uint4(0u, 0u, 0u, 0u); }
  __device__ __forceinline__ uint4 apply(int, int, const uint4& raw, const uint4&) const { return raw; }
  template <class Slot>
  __device__ __forceinline__ void begin_staged(const uint4*, Slot, int, int) const {}
};

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

// Staging xn = bf16(x * rsqrt(mean(x^2) + eps) * norm_w) instead of x, the same arithmetic in the same
// order as norm/rmsnorm.cu with its 8 warps (thread t sums the squares of vectors t, t + 256, ... with fmaf,
// then the warp's xor shuffles, then the 8 warp sums in warp order; (x * scale) * w rounded once), so xn
// is bit-identical to rmsnorm's. The nb row scales of a group go to shared memory (scratch: WARPS * BATCH +
// BATCH floats): begin(bg, nb) reads the rows through L2 (written in this launch) while a chunk's copies fly,
// begin_staged reads them from the copies once all of x is staged; apply turns a copied vector into xn in
// place (norm_w read-only).
template <int WARPS, int BATCH, class Sync>
struct StageNormed {
  static constexpr bool kTransforms = true, kComputed = false;
  const bf16* x;
  const bf16* norm_w;
  float eps;
  int K;
  float* scratch;  // [WARPS][BATCH] warp sums, then [BATCH] scales
  Sync sync;
  bool keep_in_l2 = false;  // norm_w's loads hint L2 evict_last (the _lr components' LR_L2_ASKS bit 4)

  __device__ __forceinline__ void begin(int bg, int nb) const {
    constexpr int THREADS = WARPS * 32;
    const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32;
    const int kvecs = K / 8;
    float ss[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b) ss[b] = 0.0f;
    for (int v = t; v < kvecs; v += THREADS) {
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        if (b < nb) {
          float f[8];
          unpack8(__ldcg(reinterpret_cast<const uint4*>(x + (long long)(bg + b) * K) + v), f);
#pragma unroll
          for (int i = 0; i < 8; ++i) ss[b] = fmaf(f[i], f[i], ss[b]);
        }
      }
    }
    reduce_scales(ss, nb);
  }

  // begin's scales from the raw rows, once they are in shared memory (stage_rows: dst + slot(b, v) holds vector
  // v of row b, and this thread copied vectors t, t + THREADS, ... itself, so it reads them without a barrier),
  // summed in begin's order: the same scales. x is read once through L2, not twice: at B = 8 the decode step
  // took 1269 -> 1235 us at ctx 4096, 1069 -> 1040 at ctx 1024 (`@ss` against `@base` in
  // results/w_ahead_scales_staged_ab_2026-12-03.json).
  template <class Slot>
  __device__ __forceinline__ void begin_staged(const uint4* __restrict__ dst, Slot slot, int nb, int cv) const {
    // The rows in groups of 8 in a loop kept rolled (one trip for B <= 8): unrolled into the staging around it,
    // the sums made the whole-context decode step spill (a 16-byte frame).
    constexpr int THREADS = WARPS * 32, GROUP = 8;
    const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32;
#pragma unroll 1
    for (int b0 = 0; b0 < nb; b0 += GROUP) {
      float ss[GROUP];
#pragma unroll
      for (int j = 0; j < GROUP; ++j) ss[j] = 0.0f;
      for (int v = t; v < cv; v += THREADS) {
#pragma unroll
        for (int j = 0; j < GROUP; ++j) {
          if (b0 + j < nb) {
            float f[8];
            unpack8(dst[slot(b0 + j, v)], f);
#pragma unroll
            for (int i = 0; i < 8; ++i) ss[j] = fmaf(f[i], f[i], ss[j]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < GROUP; ++j) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], off);
        if (lane == 0 && b0 + j < nb) scratch[warp * BATCH + b0 + j] = ss[j];
      }
    }
    scales_from_warps(nb);
  }

  // The row sums of squares of the threads meet (warp shuffles, then the warp sums in warp order) and become the
  // rows' scales in scratch.
  __device__ __forceinline__ void reduce_scales(float (&ss)[BATCH], int nb) const {
    constexpr int THREADS = WARPS * 32;
    const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32;
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) ss[b] += __shfl_xor_sync(0xffffffffu, ss[b], off);
      if (lane == 0 && b < nb) scratch[warp * BATCH + b] = ss[b];
    }
    scales_from_warps(nb);
  }

  // The warps' sums in scratch become the rows' scales.
  __device__ __forceinline__ void scales_from_warps(int nb) const {
    const int t = threadIdx.x % (WARPS * 32);
    sync();
    if (t < nb) {
      float total = 0.0f;
#pragma unroll
      for (int i = 0; i < WARPS; ++i) total += scratch[i * BATCH + t];
      scratch[WARPS * BATCH + t] = rsqrtf(total / (float)K + eps);
    }
    sync();  // the scales are in; the warp sums are not read again before the next group's begin
  }

  __device__ __forceinline__ const bf16* row(int b) const { return x + (long long)b * K; }
  // norm_w, read-only. With keep_in_l2 the load hints L2 evict_last: the layers' norm weights (128 KB a step)
  // stay in L2 from one step to the next while W, read once with evict_first, and the KV cache pass through.
  __device__ __forceinline__ uint4 constant(int v) const {
    const uint4* p = reinterpret_cast<const uint4*>(norm_w) + v;
    if (!keep_in_l2) return __ldg(p);
    uint4 r;
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(policy));
    return r;
  }
  __device__ __forceinline__ uint4 apply(int b, int, const uint4& raw, const uint4& w) const {
    const float scale = scratch[WARPS * BATCH + (b % BATCH)];
    float f[8], g[8];
    unpack8(raw, f);
    unpack8(w, g);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = f[i] * scale * g[i];
    return pack8(f);
  }
};

// D += A B for one m16n8k16 tile: A 16 x 16 bf16 (a0..a3), B 16 x 8 bf16 (b0, b1), D 16 x 8 fp32.
__device__ __forceinline__ void mma_16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                          unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Where vector v of staged batch row b lives in xs: odd rows swap halves of each 128-byte group, so the
// eight lanes of a quarter warp (two batch rows, four vectors each) read distinct banks.
__device__ __forceinline__ int xs_slot(int b, int v, int chunk_vecs) { return b * chunk_vecs + (v ^ ((b & 1) << 2)); }

// Staging vectors v0 .. v0 + cv - 1 of batch rows bg .. bg + nb - 1 of x into shared memory: vector v of row b
// (local indices) goes to dst + slot(b, v). Every vector is one cp.async (16 bytes through L2: x may have been
// written by another CTA of the launch), all of a thread's in flight at once and no register held, so B rows
// cost one round trip to L2, not one a row (a load-and-store loop kept one load in flight: the compiler does not
// move a load above the store before it). `between` runs while the copies fly (StageNormed's row scales).
// Then each thread applies the stage to the vectors it copied itself (its own cp.async groups: no barrier
// needed before), and the block meets at sync.
template <int THREADS, class Stage, class Slot, class Between, class Sync>
__device__ __forceinline__ void stage_rows(const Stage& stage, uint4* __restrict__ dst, int bg, int nb, int v0, int cv,
                                           Slot slot, Between between, Sync sync, bool scales_staged = false) {
  const int t = threadIdx.x % THREADS;
  if constexpr (Stage::kComputed) {  // x computed from the stage's inputs, a column of vectors at a time: nothing copied
    for (int v = t; v < cv; v += THREADS)
      stage.column(bg, nb, v0 + v, [&](int b, const uint4& x) { dst[slot(b - bg, v)] = x; });
    if (scales_staged && t == 0) pl_component::profile_mark(0);
    sync();
  } else {
    const unsigned base = (unsigned)__cvta_generic_to_shared(dst);
    for (int v = t; v < cv; v += THREADS)
      for (int b = 0; b < nb; ++b)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(base + 16u * (unsigned)slot(b, v)),
                     "l"(reinterpret_cast<const uint4*>(stage.row(bg + b)) + v0 + v)
                     : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
    // The stage's constant for the thread's first vector is loaded now, so it is not a round trip of its own
    // after the wait (a K of THREADS vectors, as in the decode step, has no other).
    const uint4 first = Stage::kTransforms && t < cv ? stage.constant(v0 + t) : make_uint4(0u, 0u, 0u, 0u);
    between();
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    if (scales_staged && t == 0) pl_component::profile_mark(0);  // a call's first task: thread 0's copies of x in
    if (scales_staged) stage.begin_staged(dst, slot, nb, cv);  // the stage's scales from the copied rows
    // a call's first task of a transforming stage (StageNormed): the scales are in, norm_w's apply to come
    if constexpr (Stage::kTransforms)
      if (scales_staged && t == 0) pl_component::profile_mark(5);
    if constexpr (Stage::kTransforms) {
      for (int v = t; v < cv; v += THREADS) {
        const uint4 c = v == t ? first : stage.constant(v0 + v);
        for (int b = 0; b < nb; ++b) dst[slot(b, v)] = stage.apply(bg + b, v0 + v, dst[slot(b, v)], c);
      }
    }
    sync();
  }
}

// All of x (B <= BATCH rows of kvecs vectors) resident in xs, chunk c of the B rows at c * B * CHUNK_VECS; the
// rows' scales (stage.begin_staged) from the copies.
template <int THREADS, int CHUNK_VECS, class Stage, class Sync>
__device__ __forceinline__ void stage_resident(const Stage& stage, uint4* __restrict__ xs, int B, int kvecs,
                                               Sync sync) {
  stage_rows<THREADS>(
      stage, xs, 0, B, 0, kvecs,
      [=](int b, int v) {
        const int c = v / CHUNK_VECS;
        return c * B * CHUNK_VECS + xs_slot(b, v - c * CHUNK_VECS, CHUNK_VECS);
      },
      [] {}, sync, true);
}

// The chunk of x at v0 (cv vectors of batch rows bg .. bg + nb - 1) in xs, when x is not resident.
template <int THREADS, int CHUNK_VECS, class Stage, class Sync>
__device__ __forceinline__ void stage_chunk(const Stage& stage, uint4* __restrict__ xs, int bg, int nb, int v0, int cv,
                                            Sync sync) {
  stage_rows<THREADS>(stage, xs, bg, nb, v0, cv, [](int b, int v) { return xs_slot(b, v, CHUNK_VECS); }, [] {}, sync);
}

// W straight from global memory (each element read once: streamed past L1). A W source also says how many of
// a task's first rows it holds in shared memory for the first K chunk (kSlotRows, a multiple of 8: ring.cuh's
// WRing holds 8, WGlobal none); rows_from reads those with slot() at the mma, so they take no register.
struct WGlobal {
  static constexpr int kSlotRows = 0;
  static constexpr bool kLoaderRing = false;
  const bf16* w;
  int K;
  __device__ __forceinline__ void begin() const {}
  __device__ __forceinline__ uint4 load(int, int n, int v0, int v) const {
    return load_stream(w + (long long)n * K + (long long)(v0 + v) * 8);
  }
  __device__ __forceinline__ uint4 slot(int, int) const { return make_uint4(0u, 0u, 0u, 0u); }
};

// A warp's 32-wide blocks of a chunk per round of W loads: the most that divides the chunk's `kpw` and keeps a
// lane's vectors of `halves` 8-row halves within 8 (32 registers); at least one.
constexpr int blocks_per_pass(int kpw, int halves) {
  int best = 1;
  for (int u = 1; u <= kpw; ++u)
    if (kpw % u == 0 && halves * u <= 8) best = u;
  return best;
}

// The floats of rows_from's `sums` buffer: every warp's fp32 sums of the task's rows for 8 batch columns.
template <int WARPS, int ROWS>
constexpr int sums_floats = WARPS * ROWS * 8;

// The end of a batch group: each warp's two mma chains of every m16 tile go to sums[warp][local row][batch column]
// (fp32), then some thread adds the warps' sums in warp order and calls store(i, bg, b, s) for every local row i
// and batch row b < nb, then flush(bg, nb) on every thread.
template <int WARPS, int ROWS, class Store, class Flush, class Sync>
__device__ __forceinline__ void sum_and_store(const float (&acc)[(ROWS + 15) / 16][2][4], float* __restrict__ sums,
                                              int bg, int nb, Store store, Flush flush, Sync sync) {
  constexpr int MT = (ROWS + 15) / 16, THREADS = WARPS * 32;
  const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (mt * 16 + h * 8 < ROWS)
        *reinterpret_cast<float2*>(sums + (warp * ROWS + mt * 16 + h * 8 + g) * 8 + 2 * q) =
            make_float2(acc[mt][0][2 * h] + acc[mt][1][2 * h], acc[mt][0][2 * h + 1] + acc[mt][1][2 * h + 1]);
  sync();
  for (int idx = t; idx < ROWS * nb; idx += THREADS) {
    const int b = idx / ROWS, i = idx - b * ROWS;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) s += sums[(w * ROWS + i) * 8 + b];
    store(i, bg, b, s);
  }
  flush(bg, nb);
}

// W through the kernel's loader ring (pipelink/component.h's pl::ring; the `_lr` components): the load entry
// (the loader warp) copies a task's W, SLOT_K columns of its ROWS rows per slot, slot after slot in K order (and
// again per group of BATCH batch rows), before the task waits; the entry reads each slot at the mma and releases
// it. W comes packed in the order the walk reads it (linear/packing.py), so a slot is one contiguous bulk copy:
// task t's rows (in local row order, absent rows zero) and K padded to whole 32-wide blocks, as
// [t][32-wide block][8-row half][row g][k quarter q][8 bf16]: the 16-byte vector lane 4g + q of a warp reads for
// one half and block. A warp's read of a half is 512 contiguous bytes (no bank conflict), and a task's bytes are
// contiguous, slot after slot: one copy a slot where rows of W took one a row (the count of copies, not the
// bytes in flight, bounded the ring: the case study's PERFORMANCE.md).
template <int ROWS, int SLOT_K>
struct WLoaderRing {
  static_assert(ROWS % 8 == 0 && SLOT_K % 32 == 0, "gemv: packed W is whole 8-row halves and 32-wide blocks");
  static constexpr int kSlotRows = 0;
  static constexpr bool kLoaderRing = true;
  static constexpr int kHalves = ROWS / 8;
  static constexpr int kSlotBytes = ROWS * SLOT_K * 2;
  static constexpr int kSlotK = SLOT_K;
  pl::Tile tile;
  // rows_from's register walk (compiled, never run: rows_from hands a loader ring to rows_ring)
  __device__ __forceinline__ void begin() const {}
  __device__ __forceinline__ uint4 load(int, int, int, int) const { return make_uint4(0u, 0u, 0u, 0u); }
  __device__ __forceinline__ uint4 slot(int, int) const { return make_uint4(0u, 0u, 0u, 0u); }
};

// K padded to whole 32-wide blocks: a packed row's length (linear/packing.py's padded_k).
__device__ __forceinline__ int packed_k(int K) { return (K + 31) / 32 * 32; }

// The load entry's body (the loader warp): task `task`'s slots of packed W, in the order rows_ring drains them,
// one bulk copy a slot by lane 0.
// With load_ahead, which L2 requests the entry makes (the contract's LR_L2_ASKS, a value of the kernel): bit 0 the
// loader's calls ahead (tile.ahead), bit 1 its own (a task's slots past the ring, norm_w); 3, both, by default. A
// measurement switch: the two were never timed apart.
// Bit 2: each request as line prefetches (prefetch.global.L2::evict_last, one 128-byte line a lane at a time)
// instead of one bulk request through the SM's copy engine, which the ring's copies queue behind.
// Bit 3: norm_w asked of L2 (norm_w_ahead) with or without load_ahead, and q/k/v's pos and inv_freq (constant_ahead).
// Bit 4: a normed GEMV's stage reads norm_w with an L2 evict_last hint (StageNormed::keep_in_l2), whatever else.
constexpr int kAsksAhead = 1, kAsksOwn = 2, kAsksLines = 4, kAsksConstants = 8, kKeepNormW = 16;

template <int ROWS, int SLOT_K, int BATCH>
__device__ __forceinline__ void load_slots(const pl::Tile& tile, const bf16* __restrict__ w_packed, long long task,
                                           int B, int K, int asks = kAsksAhead | kAsksOwn) {
  const int kp = packed_k(K);
  const bf16* const src = w_packed + task * ROWS * (long long)kp;
  const int slots = (kp + SLOT_K - 1) / SLOT_K;
  const auto ask_l2 = [&](int from) {  // slots from .. slots - 1 of the task's W into L2, one request a slot
    if (asks & kAsksLines) {
      for (int j = from; j < slots; ++j) {
        const char* const at = reinterpret_cast<const char*>(src + (long long)j * ROWS * SLOT_K);
        const unsigned bytes = (unsigned)(ROWS * min(SLOT_K, kp - j * SLOT_K) * 2);
        for (unsigned off = (threadIdx.x % 32) * 128u; off < bytes; off += 32u * 128u)
          asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(at + off) : "memory");
      }
    } else if (threadIdx.x % 32 == 0) {
      for (int j = from; j < slots; ++j)
        pl::ring::ahead_l2(src + (long long)j * ROWS * SLOT_K, (unsigned)(ROWS * min(SLOT_K, kp - j * SLOT_K) * 2));
    }
  };
  if (tile.ahead) {  // the loader, tasks before this one's turn (loader.ahead): all of its W
    if (asks & kAsksAhead) ask_l2(0);
    __syncwarp();
    return;
  }
  // With load_ahead, a task longer than the ring (down: 8 slots of 32 KB through 4) also asks L2 for the slots
  // past the ring's as its loading starts, as the loader's calls ahead do for later tasks.
  if (pl_ring__ahead > 0u && (asks & kAsksOwn)) ask_l2((int)pl_ring__slots);
  for (int bg = 0, s = 0; bg < B; bg += BATCH) {
    for (int j = 0; j < slots; ++j, ++s) {
      if (!pl::ring::acquire(tile, s)) return;
      if (threadIdx.x % 32 == 0) {
        const unsigned bytes = (unsigned)(ROWS * min(SLOT_K, kp - j * SLOT_K) * 2);
        pl::ring::expect(tile, s, bytes);
        pl::ring::copy(tile, s, 0u, src + (long long)j * ROWS * SLOT_K, bytes);
      }
      __syncwarp();
    }
  }
}

// With load_ahead (or LR_L2_ASKS's bit 3), the load entry of a normed GEMV asks L2 for norm_w as it loads the
// call's first task on the CTA: a constant of the layer that the task reads right after x is staged, else a miss
// to HBM there (while W's stream fills HBM's queues), ahead of the norm. (The 16-byte multiple at a 16-byte
// aligned address only: what a bulk request takes.)
__device__ __forceinline__ void norm_w_ahead(const pl::Tile& tile, const bf16* __restrict__ norm_w, int K,
                                             int asks = kAsksAhead | kAsksOwn) {
  const unsigned bytes = (unsigned)K * 2u / 16u * 16u;
  const bool ask = (pl_ring__ahead > 0u && (asks & kAsksOwn)) || (asks & kAsksConstants);
  if (ask && !tile.ahead && !tile.continues && threadIdx.x % 32 == 0 && bytes > 0u &&
      (reinterpret_cast<unsigned long long>(norm_w) & 15ull) == 0ull)
    pl::ring::ahead_l2(norm_w, bytes);
}

// With LR_L2_ASKS's bit 3, a load entry asks L2 for a small constant its call's first task on the CTA reads (q/k/v's
// pos and inv_freq, in its epilogue) as the loader reaches the task: one line prefetch a lane, any size and
// alignment (a bulk request needs 16-byte multiples), so the read is an L2 hit, not a miss to HBM behind W's stream.
__device__ __forceinline__ void constant_ahead(const pl::Tile& tile, const void* p, unsigned bytes, int asks) {
  if (!(asks & kAsksConstants) || tile.ahead || tile.continues || p == nullptr) return;
  const char* const base = reinterpret_cast<const char*>(reinterpret_cast<unsigned long long>(p) & ~127ull);
  const unsigned lines = (unsigned)((reinterpret_cast<const char*>(p) + bytes - base + 127) / 128);
  for (unsigned i = threadIdx.x % 32; i < lines; i += 32)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + 128ull * i) : "memory");
}

// x arriving in pieces: where a task's x is written by the tasks of another call of the launch and the task waits
// for them in its entry (the contract's in-entry wait), it stages x's columns as they are ready instead of all of
// x before its first slot, so its first slots run (and free the ring for the loader) while the last pieces of x
// are still being written. XWhole: x is ready when the task starts (the glue waited), the default.
struct XWhole {
  static constexpr bool kPieces = false;
  __device__ __forceinline__ static long long elements() { return 0; }
};
// The component's in-entry wait, through `Src`'s static functions (its header's, in pieces: no state, so nothing
// of it stays live in registers across the walk): elements(), first_unmet(i0, i1, step), wait(i); cols(), the
// columns of every row of x that element e covers from e * cols(); met(), two ints of shared memory no other code of
// the task uses while it stages.
template <class Src>
struct XPieces : Src {
  static constexpr bool kPieces = true;
};

// Wait until elements lo .. hi - 1 are all met, each thread its own (lo + t, lo + t + THREADS, ...): four reads in
// flight at once a round (first_unmet), not one round trip an element. After many rounds, each element's own wait:
// a debug build's bounded one, which reports a wait that never ends instead of spinning here for ever.
template <int THREADS, class Pieces>
__device__ __forceinline__ void wait_pieces(const Pieces& pieces, int lo, int hi) {
  const int t = threadIdx.x % THREADS;
  for (int base = lo; base < hi; base += 4 * THREADS) {
    const int end = min(hi, base + 4 * THREADS);
    for (int round = 0; pieces.first_unmet(base + t, end, THREADS) < end; ++round) {
      if (round == 256) {
        for (int e = base + t; e < end; e += THREADS) pieces.wait(e);
        break;
      }
      __nanosleep(64);
    }
  }
}

// Stage x's vectors from `from` on (all B rows, resident layout) up to at least `need`, and as far past it as its
// pieces are ready now: one round trip finds how far (every thread asks for its elements, the block takes the
// least not met), a wait for the rest of `need` only where that falls short, then one round of copies. Returns
// the vectors staged (kvecs: all). `round` picks the word the block's least answer meets in (two alternate, so
// a thread still reading one round's cannot see the next round's). False in `ok`: a debug build's wait ran out.
template <int THREADS, int CHUNK_VECS, class Stage, class Pieces, class Sync>
__device__ __forceinline__ int stage_pieces(const Stage& stage, uint4* __restrict__ xs, int B, int kvecs, int from,
                                            int need, Pieces pieces, int round, Sync sync) {
  const int t = threadIdx.x % THREADS;
  const int n = (int)pieces.elements(), cols = pieces.cols();  // a counter an element: fewer than 2^31
  const int e_from = from * 8 / cols;
  const int e_need = min(n, (need * 8 + cols - 1) / cols);
  int* const word = pieces.met() + (round & 1);
  if (t == 0) *word = n;
  sync();
  atomicMin(word, (int)pieces.first_unmet(e_from + t, n, THREADS));
  sync();
  int ready = *word;
  if (ready < e_need) {  // the piece this slot reads is not written yet: wait for it (and those before it)
    wait_pieces<THREADS>(pieces, ready, e_need);
    ready = e_need;
    sync();  // every thread copies columns another one waited for
  }
  const int to = ready >= n ? kvecs : min(kvecs, (int)((long long)ready * cols / 8));
  stage_rows<THREADS>(
      stage, xs, 0, B, from, to - from,
      [=](int b, int v) {
        const int va = from + v, c = va / CHUNK_VECS;
        return c * B * CHUNK_VECS + xs_slot(b, va - c * CHUNK_VECS, CHUNK_VECS);
      },
      [] {}, sync);
  return to;
}

// rows_from's walk with W from the loader ring: per slot, wait for it, each warp multiplies its 32-wide blocks
// of the slot (SLOT_K / 32 / WARPS of them) against x, and releases it. x, the sums and the epilogue as in
// rows_from.
template <int WARPS, int ROWS, int KCHUNK, int BATCH, int SLOT_K, class Stage, class RowOf, class Store,
          class Flush, class Sync, class Pieces = XWhole>
__device__ __forceinline__ void rows_ring(const pl::Tile& tile, const Stage& stage, int B, int K,
                                          uint4* __restrict__ xs, float* __restrict__ sums, int continues,
                                          RowOf row_of, Store store, Flush flush, Sync sync, Pieces pieces = {}) {
  static_assert(ROWS % 8 == 0, "gemv: a task is a whole number of 8-row halves of an mma tile");
  static_assert(KCHUNK % SLOT_K == 0 && SLOT_K % (32 * WARPS) == 0,
                "gemv: a K chunk is whole slots, and a slot whole 32-wide blocks for every warp");
  static_assert(BATCH >= 1 && BATCH <= 8, "gemv: the batch rows of a group are the 8 columns of the mma");
  constexpr int THREADS = WARPS * 32;
  constexpr int MT = (ROWS + 15) / 16;
  constexpr int CHUNK_VECS = KCHUNK / 8;
  constexpr int SLOT_VECS = SLOT_K / 8;
  constexpr int BPW = SLOT_K / 32 / WARPS;  // a warp's 32-wide blocks of a slot
  constexpr int HALVES = WLoaderRing<ROWS, SLOT_K>::kHalves;
  const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32;
  const int g = lane / 4, q = lane % 4;
  const int kvecs = K / 8;
  const int chunks = (kvecs + CHUNK_VECS - 1) / CHUNK_VECS;
  const bool resident = B <= BATCH && B * chunks <= BATCH;
  bool row_ok[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) row_ok[mt][h] = mt * 16 + h * 8 < ROWS && row_of(mt * 16 + h * 8 + g) >= 0;

  // x in pieces (an in-entry wait): where all of x stays resident, staged slot by slot as far as it is ready, not
  // before the first slot (a task that continues the call found all of x staged by the one before, which read
  // every slot); else each chunk's pieces are waited for before the chunk is staged.
  const bool in_pieces = Pieces::kPieces && pieces.elements() > 0;
  int staged = continues ? kvecs : 0, round = 0;  // in pieces: x's vectors staged so far
  if (resident && !continues && !in_pieces) {  // the call's first task on this CTA: all of x, once (the loader is
    stage_resident<THREADS, CHUNK_VECS>(stage, xs, B, kvecs, sync);  // already streaming this task's W)
    if (t == 0) pl_component::profile_mark(1);  // x staged (the marks as rows_from's below)
  }

  int s = 0;  // the task's next slot
  for (int bg = 0; bg < B; bg += BATCH) {
    const int nb = min(BATCH, B - bg);
    if (!resident) stage.begin(bg, nb);
    float acc[MT][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][0][e] = acc[mt][1][e] = 0.0f;
    for (int v0 = 0, c = 0; v0 < kvecs; v0 += CHUNK_VECS, ++c) {
      const int cv = min(CHUNK_VECS, kvecs - v0);
      if constexpr (Pieces::kPieces) {
        if (in_pieces && !resident && bg == 0 && !continues) {  // x staged a chunk at a time: the chunk's pieces
          const int cols = pieces.cols(), n = (int)pieces.elements();  // first (later batch groups, and a task
                                                                       // that continues the call, find them met)
          wait_pieces<THREADS>(pieces, v0 * 8 / cols, min(n, ((v0 + cv) * 8 + cols - 1) / cols));
          sync();  // every thread copies columns another one waited for
        }
      }
      if (!resident) stage_chunk<THREADS, CHUNK_VECS>(stage, xs, bg, nb, v0, cv, sync);
      const uint4* const xc = resident ? xs + c * B * CHUNK_VECS : xs;
      for (int sv = 0; sv < cv; sv += SLOT_VECS, ++s) {
        if constexpr (Pieces::kPieces) {
          if (in_pieces && resident && staged < min(kvecs, v0 + sv + SLOT_VECS)) {
            staged = stage_pieces<THREADS, CHUNK_VECS>(stage, xs, B, kvecs, staged, min(kvecs, v0 + sv + SLOT_VECS),
                                                       pieces, round++, sync);
            if (t == 0 && s == 0) pl_component::profile_mark(1);  // the first pieces of x staged
          }
        }
        pl::ring::wait(tile, s);
        const unsigned char* const slot = pl::ring::slot(tile, s);
#pragma unroll
        for (int u = 0; u < BPW; ++u) {
          const int blk = u * WARPS + warp;
          const int v = sv + blk * 4 + q;  // the lane's vector of the chunk
          const bool in = v < cv;
          const uint4 xv = (g < nb && in) ? xc[xs_slot(g, v, CHUNK_VECS)] : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            uint4 half[2];
#pragma unroll
            for (int h = 0; h < 2; ++h)
              half[h] = (row_ok[mt][h] && in)
                            ? *reinterpret_cast<const uint4*>(slot + ((blk * HALVES + mt * 2 + h) * 32 + lane) * 16)
                            : make_uint4(0u, 0u, 0u, 0u);
            mma_16816(acc[mt][0], half[0].x, half[1].x, half[0].y, half[1].y, xv.x, xv.y);
            mma_16816(acc[mt][1], half[0].z, half[1].z, half[0].w, half[1].w, xv.z, xv.w);
          }
        }
        pl::ring::release(tile, s);
        if (t == 0 && s == 0 && bg == 0) pl_component::profile_mark(2);  // warp 0's first slot of W in and used
      }
      if (!resident) sync();
    }
    if (t == 0 && bg == 0) pl_component::profile_mark(3);
    sum_and_store<WARPS, ROWS>(acc, sums, bg, nb, store, flush, sync);
    if (t == 0 && bg == 0) pl_component::profile_mark(4);
    if (bg + BATCH < B) sync();  // the sums are read before the next group's warps write theirs
  }
}

// The general form: local row i (0 .. ROWS - 1) of the task is row row_of(i) of W (-1: none, it sums to
// 0 and is not stored). For each group of up to BATCH batch rows starting at bg, some thread of the block
// calls store(i, bg, b, s) with the fp32 sum s of batch row bg + b (b < nb), once for every local row, valid
// or not; then flush(bg, nb) runs on every thread (an epilogue that may meet at sync() to read what the
// stores left in shared memory).
// Sync: a callable that synchronizes the component's THREADS threads (its named barrier).
// stage: StageRaw, StageNormed or any type with their begin and load.
// wsrc: where W comes from (WGlobal; ring.cuh's WRing holds the first K chunk of the task's first 8 rows in
// shared memory): load(i, n, v0, v) is the 16-byte vector v0 + v of row n, local row i; slot(i, v) vector v of
// local row i < kSlotRows in the first chunk.
// xs: BATCH * KCHUNK bf16 of shared memory; sums: WARPS * ROWS * 8 floats (sums_floats).
// continues: the CTA's previous task was of the same call and left xs as it was (pass tile.continues).
// Profile marks (a link with a task profile; folded away elsewhere): in the call's first task on the CTA 0 thread
// 0's copies of x in, 1 x staged (normed: the row scales summed, x scaled); in every task 2 warp 0's first pass
// of W in (its mmas done), 3 warp 0's walk over W done, 4 the sums stored.
template <int WARPS, int ROWS, int KCHUNK, int BATCH, class WSrc, class Stage, class RowOf, class Store, class Flush,
          class Sync, class Pieces = XWhole>
__device__ __forceinline__ void rows_from(const WSrc& wsrc, const Stage& stage, int B, int K,
                                          uint4* __restrict__ xs, float* __restrict__ sums, int continues,
                                          RowOf row_of, Store store, Flush flush, Sync sync, Pieces pieces = {}) {
  if constexpr (WSrc::kLoaderRing) {
    rows_ring<WARPS, ROWS, KCHUNK, BATCH, WSrc::kSlotK>(wsrc.tile, stage, B, K, xs, sums, continues, row_of, store,
                                                        flush, sync, pieces);
    return;
  } else {
    static_assert(!Pieces::kPieces, "gemv: x in pieces is read from the loader ring's walk only");
  }
  static_assert(ROWS % 8 == 0, "gemv: a task is a whole number of 8-row halves of an mma tile");
  static_assert(KCHUNK % (32 * WARPS) == 0, "gemv: a K chunk deals whole 32-wide blocks to every warp");
  static_assert(BATCH >= 1 && BATCH <= 8, "gemv: the batch rows of a group are the 8 columns of the mma");
  constexpr int THREADS = WARPS * 32;
  constexpr int MT = (ROWS + 15) / 16;            // m16 tiles of the task's rows
  constexpr int KPW = KCHUNK / 32 / WARPS;        // 32-wide blocks of a chunk per warp
  constexpr int CHUNK_VECS = KCHUNK / 8;          // 16-byte vectors of one staged x row
  // A lane holds at most 8 of its W vectors (32 registers) at once: a task of more than 8 rows takes a chunk's
  // W in PASSES rounds of loads (16 rows: two), so its registers stay those of an 8-row task. With 64
  // registers of W the decode step spilled (a 40-byte frame) and ran 5% slower than with 8-row tasks; in two
  // passes the 16-row tasks ran 7% faster than the 8-row ones.
  constexpr int HALVES = (ROWS + 7) / 8;          // 8-row halves of mma tiles that hold rows
  constexpr int UPP = blocks_per_pass(KPW, HALVES);  // a warp's 32-wide blocks per pass
  constexpr int PASSES = KPW / UPP;
  // A source's slot rows are read from shared memory at the mma in the first chunk: only the other halves take
  // registers there, so a 16-row task with 8 slot rows walks that chunk in one pass (one round trip), not two.
  constexpr int SLOT_HALVES = (WSrc::kSlotRows < ROWS ? WSrc::kSlotRows : ROWS) / 8;
  constexpr int UPP_SLOT = blocks_per_pass(KPW, HALVES - SLOT_HALVES > 0 ? HALVES - SLOT_HALVES : 1);
  const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32;
  const int g = lane / 4, q = lane % 4;           // the lane's row (A, D) or batch column (B), and k quarter
  const int kvecs = K / 8;
  const int chunks = (kvecs + CHUNK_VECS - 1) / CHUNK_VECS;
  // All of x stays in xs (chunk c of the B rows at c * B * CHUNK_VECS): staged by the call's first task here.
  const bool resident = B <= BATCH && B * chunks <= BATCH;
  // W rows of this lane: local rows 16 mt + 8 h + g (h = 0: A rows 0-7, h = 1: rows 8-15).
  int row_n[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) row_n[mt][h] = mt * 16 + h * 8 < ROWS ? row_of(mt * 16 + h * 8 + g) : -1;
  wsrc.begin();

  // The lane's W vectors of pass p of the chunk at v0 (zeros past the chunk's cv vectors and for rows that are
  // none).
  uint4 wv[MT][2][UPP];
  const auto load_w = [&](int v0, int cv, int p) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int u = 0; u < UPP; ++u) {
          const int v = ((p * UPP + u) * WARPS + warp) * 4 + q;
          const int n = row_n[mt][h];
          wv[mt][h][u] = (mt * 16 + h * 8 < ROWS && n >= 0 && v < cv) ? wsrc.load(mt * 16 + h * 8 + g, n, v0, v)
                                                                       : make_uint4(0u, 0u, 0u, 0u);
        }
  };

  if (resident && !continues) {  // the call's first task on this CTA: all of x, once
    // The first chunk's W loads are not issued before the prologue: live across it, its 32 registers made
    // the whole decode step spill (112-byte frame) under the joint 128-register cap; with x staged by copies
    // still 416 bytes (288 with the first pass ahead only where x is staged as it is, no norm in between); one
    // 32-wide block of them ahead links clean but the pass still waits for its last loads, two spill 32 bytes.
    // With the pass's mmas peeled out of the loops the step spilled 40 bytes and ran slower, and the separate
    // kernels, clean, were no faster at B = 1. Copying them into L1 (cp.async.ca) made the first tasks longer
    // (PERFORMANCE.md, Tried).
    stage_resident<THREADS, CHUNK_VECS>(stage, xs, B, kvecs, sync);
    if (t == 0) pl_component::profile_mark(1);  // x staged (and normed): profiled links only, else folded away
  }

  for (int bg = 0; bg < B; bg += BATCH) {
    const int nb = min(BATCH, B - bg);
    if (!resident) stage.begin(bg, nb);
    float acc[MT][2][4];  // two chains: the first and second mma of each 32-wide block
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][0][e] = acc[mt][1][e] = 0.0f;

    // The lane's vector v of its batch column's x in the chunk xc (zeros past the rows and the chunk).
    const auto x_vec = [&](const uint4* xc, int v, int cv) {
      return (g < nb && v < cv) ? xc[xs_slot(g, v, CHUNK_VECS)] : make_uint4(0u, 0u, 0u, 0u);
    };
    // One 32-wide block of an m16 tile: rows 0-7 (lo) and 8-15 (hi) of A against x, two chains.
    const auto mma_block = [](float (&a)[2][4], const uint4& lo, const uint4& hi, const uint4& xv) {
      mma_16816(a[0], lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);  // k = 8q .. 8q+3 of the block
      mma_16816(a[1], lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);  // k = 8q+4 .. 8q+7
    };

    for (int v0 = 0, c = 0; v0 < kvecs; v0 += CHUNK_VECS, ++c) {
      const int cv = min(CHUNK_VECS, kvecs - v0);  // vectors of this chunk
      const uint4* const xc = resident ? xs + c * B * CHUNK_VECS : xs;
      if constexpr (SLOT_HALVES > 0) {
        if (c == 0) {  // the source's slot rows from shared memory, the others in passes of UPP_SLOT blocks
          uint4 wr[MT][2][UPP_SLOT];
#pragma unroll 1
          for (int p = 0; p < KPW / UPP_SLOT; ++p) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
              for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int u = 0; u < UPP_SLOT; ++u) {
                  const int v = ((p * UPP_SLOT + u) * WARPS + warp) * 4 + q;
                  const int n = row_n[mt][h];
                  if (mt * 2 + h >= SLOT_HALVES)
                    wr[mt][h][u] = (mt * 16 + h * 8 < ROWS && n >= 0 && v < cv) ? wsrc.load(mt * 16 + h * 8 + g, n, v0, v)
                                                                                 : make_uint4(0u, 0u, 0u, 0u);
                }
            if (p == 0 && !resident) stage_chunk<THREADS, CHUNK_VECS>(stage, xs, bg, nb, v0, cv, sync);
#pragma unroll
            for (int u = 0; u < UPP_SLOT; ++u) {
              const int v = ((p * UPP_SLOT + u) * WARPS + warp) * 4 + q;
              const uint4 xv = x_vec(xc, v, cv);
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) {
                uint4 half[2];
#pragma unroll
                for (int h = 0; h < 2; ++h)
                  half[h] = mt * 2 + h >= SLOT_HALVES ? wr[mt][h][u]
                            : (row_n[mt][h] >= 0 && v < cv) ? wsrc.slot(mt * 16 + h * 8 + g, v)
                                                            : make_uint4(0u, 0u, 0u, 0u);
                mma_block(acc[mt], half[0], half[1], xv);  // the blocks in the plain walk's order: the same sums
              }
            }
          }
          if (!resident) sync();
          continue;
        }
      }
#pragma unroll 1  // a loop, not unrolled: the scheduler would hoist the next pass's loads (and spill)
      for (int p = 0; p < PASSES; ++p) {
        load_w(v0, cv, p);
        if (p == 0 && !resident) stage_chunk<THREADS, CHUNK_VECS>(stage, xs, bg, nb, v0, cv, sync);
#pragma unroll
        for (int u = 0; u < UPP; ++u) {
          const int v = ((p * UPP + u) * WARPS + warp) * 4 + q;
          const uint4 xv = x_vec(xc, v, cv);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_block(acc[mt], wv[mt][0][u], wv[mt][1][u], xv);
          }
        }
        if (t == 0 && p == 0 && c == 0 && bg == 0) pl_component::profile_mark(2);  // warp 0's first pass of W in
      }
      if (!resident) sync();  // every warp is done with this chunk of x before the next one is staged
    }
    if (t == 0 && bg == 0) pl_component::profile_mark(3);  // warp 0's walk over W done

    sum_and_store<WARPS, ROWS>(acc, sums, bg, nb, store, flush, sync);
    if (t == 0 && bg == 0) pl_component::profile_mark(4);  // the warps' sums added and stored
    if (bg + BATCH < B) sync();  // the sums are read before the next group's warps write theirs
  }
}

// The plain form: rows n0 .. n0 + ROWS - 1 of W (those below N), y[b, n] = s (+ r[b, n]), rounded once; W from
// `wsrc` (rows: from global memory). r and y may be one tensor (a residual added in place: the residual
// components' contracts say `may_alias`), so neither is __restrict__: the thread that stores an element of y has
// loaded that element of r just before, and no thread of the call reads an element another one writes.
template <int WARPS, int ROWS, int KCHUNK, int BATCH, bool kResidual, class WSrc, class Stage, class Sync,
          class Pieces = XWhole>
__device__ __forceinline__ void rows_src(int n0, const WSrc& wsrc, const Stage& stage,
                                         const bf16* r, bf16* y, int B, int N, int K,
                                         uint4* __restrict__ xs, float* __restrict__ sums, int continues,
                                         Sync sync, Pieces pieces = {}) {
  rows_from<WARPS, ROWS, KCHUNK, BATCH>(
      wsrc, stage, B, K, xs, sums, continues, [=](int i) { return n0 + i < N ? n0 + i : -1; },
      [=](int i, int bg, int b, float s) {
        const int n = n0 + i;
        if (n < N) {
          const long long at = (long long)(bg + b) * N + n;
          if constexpr (kResidual) s += __bfloat162float(__ldcg(r + at));  // r may be written in this launch
          y[at] = __float2bfloat16_rn(s);
        }
      },
      [](int, int) {}, sync, pieces);
}

template <int WARPS, int ROWS, int KCHUNK, int BATCH, bool kResidual, class Stage, class Sync>
__device__ __forceinline__ void rows(int n0, const bf16* __restrict__ w, const Stage& stage,
                                     const bf16* r, bf16* y, int B, int N, int K,
                                     uint4* __restrict__ xs, float* __restrict__ sums, int continues, Sync sync) {
  rows_src<WARPS, ROWS, KCHUNK, BATCH, kResidual>(n0, WGlobal{w, K}, stage, r, y, B, N, K, xs, sums, continues, sync);
}

}  // namespace gemv_body
