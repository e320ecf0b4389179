// The body the gemv components share: y[b, n] = sum over k of x[b, k] * W[n, k] (+ r[b, n]), bf16 in
// and out, fp32 accumulation, for the ROWS rows of W that start at n0.
//
// Each warp owns ROWS / WARPS rows of W. K goes in chunks of KCHUNK columns: every lane first issues its
// KCHUNK / 256 16-byte loads of each of its rows (streamed past L1: each element of W is read once), then
// the block stages the chunk of up to BATCH rows of x in shared memory (16-byte loads through L2: x may
// have been written by another CTA in this launch), meets at the named barrier, and every lane multiplies
// its W vectors with the staged x of each batch row. A batch larger than BATCH walks W again per group
// of BATCH rows. Only W (constant for the launch) takes the read-only path (ld.global.nc); x and r, which
// other CTAs of a fused kernel write, are loaded with ld.global.cg. The lanes' partial sums meet in a
// shuffle reduction; lane b writes y[b, n].
//
// rows_with is the same walk with the task's rows and its epilogue left to the component: which row of W
// each local row is (qkv_rope pairs the rotary halves of a head in one task, gemv_swiglu pairs gate and up
// rows), and what becomes of the fp32 sums (rotated, gated, or reduced to an argmax through shared memory).
// rows_staged also leaves the staging of x to the component: StageRaw copies x as it is, StageNormed
// stages RMSNorm(x) computed on the fly (the *_normed components: no separate norm task, no hand-off).
#pragma once
#include <cuda_bf16.h>

namespace gemv_body {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint4 load_stream(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
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

// Staging x as it is: stage.begin(bg, nb) before each group of batch rows, stage.load(b, v) the v-th 16-byte
// vector of batch row b of x.
struct StageRaw {
  const bf16* x;
  int K;
  __device__ __forceinline__ void begin(int, int) const {}
  __device__ __forceinline__ uint4 load(int b, int v) const {
    return __ldcg(reinterpret_cast<const uint4*>(x + (long long)b * K) + v);
  }
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
// is bit-identical to rmsnorm's. begin(bg, nb) computes the nb row scales of the group into shared memory
// (scratch: WARPS * BATCH + BATCH floats); x is read through L2 (written in this launch), norm_w is not.
template <int WARPS, int BATCH, class Sync>
struct StageNormed {
  const bf16* x;
  const bf16* norm_w;
  float eps;
  int K;
  float* scratch;  // [WARPS][BATCH] warp sums, then [BATCH] scales
  Sync sync;

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
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) ss[b] += __shfl_xor_sync(0xffffffffu, ss[b], off);
      if (lane == 0 && b < nb) scratch[warp * BATCH + b] = ss[b];
    }
    sync();
    if (t < nb) {
      float total = 0.0f;
#pragma unroll
      for (int i = 0; i < WARPS; ++i) total += scratch[i * BATCH + t];
      scratch[WARPS * BATCH + t] = rsqrtf(total / (float)K + eps);
    }
    sync();  // the scales are in; the warp sums are not read again before the next group's begin
  }

  __device__ __forceinline__ uint4 load(int b, int v) const {
    const float scale = scratch[WARPS * BATCH + (b % BATCH)];
    float f[8], g[8];
    unpack8(__ldcg(reinterpret_cast<const uint4*>(x + (long long)b * K) + v), f);
    unpack8(__ldg(reinterpret_cast<const uint4*>(norm_w) + v), g);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = f[i] * scale * g[i];
    return pack8(f);
  }
};

// The general form: local row i (0 .. ROWS - 1) of the task is row row_of(i) of W (-1: none, it sums to
// 0 and is not stored). For each group of up to BATCH batch rows starting at bg, lane b of the warp owning
// local row i calls store(i, bg, b, s) with the fp32 sum s of batch row bg + b (b < nb), for every local row,
// valid or not; then flush(bg, nb) runs on every thread (an epilogue that may meet at sync()).
// Sync: a callable that synchronizes the component's THREADS threads (its named barrier).
// stage: StageRaw, StageNormed or any type with their begin and load.
// W straight from global memory (each element read once: streamed past L1).
struct WGlobal {
  const bf16* w;
  int K;
  __device__ __forceinline__ void begin() const {}
  __device__ __forceinline__ uint4 load(int, int n, int v0, int v) const {
    return load_stream(w + (long long)n * K + (long long)(v0 + v) * 8);
  }
};

// wsrc: where W comes from (WGlobal; ring.cuh's WRing takes the first K chunk from shared memory).
template <int WARPS, int ROWS, int KCHUNK, int BATCH, class WSrc, class Stage, class RowOf, class Store, class Flush,
          class Sync>
__device__ __forceinline__ void rows_from(const WSrc& wsrc, const Stage& stage, int B, int K,
                                          uint4* __restrict__ xs, RowOf row_of, Store store, Flush flush,
                                          Sync sync) {
  static_assert(ROWS % WARPS == 0, "gemv: the rows of a task must split evenly over the warps");
  static_assert(KCHUNK % 256 == 0, "gemv: a K chunk is a whole number of warp-wide 16-byte sweeps");
  static_assert(BATCH >= 1 && BATCH <= 32, "gemv: lane b writes batch row b");
  constexpr int THREADS = WARPS * 32;
  constexpr int RPW = ROWS / WARPS;        // rows of W per warp
  constexpr int VPL = KCHUNK / 256;        // 16-byte vectors per lane per row and chunk
  constexpr int CHUNK_VECS = KCHUNK / 8;   // 16-byte vectors of one staged x row
  const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32;
  const int kvecs = K / 8;
  wsrc.begin();

  for (int bg = 0; bg < B; bg += BATCH) {
    const int nb = min(BATCH, B - bg);
    stage.begin(bg, nb);
    float acc[RPW][BATCH];
#pragma unroll
    for (int i = 0; i < RPW; ++i)
#pragma unroll
      for (int b = 0; b < BATCH; ++b) acc[i][b] = 0.0f;

    for (int v0 = 0; v0 < kvecs; v0 += CHUNK_VECS) {
      const int cv = min(CHUNK_VECS, kvecs - v0);  // vectors of this chunk
      uint4 wv[RPW][VPL];
#pragma unroll
      for (int i = 0; i < RPW; ++i) {
        const int n = row_of(warp * RPW + i);
#pragma unroll
        for (int u = 0; u < VPL; ++u) {
          const int v = u * 32 + lane;
          wv[i][u] = (n >= 0 && v < cv) ? wsrc.load(warp * RPW + i, n, v0, v) : make_uint4(0u, 0u, 0u, 0u);
        }
      }
      for (int idx = t; idx < nb * cv; idx += THREADS) {
        const int b = idx / cv, v = idx - b * cv;
        xs[b * CHUNK_VECS + v] = stage.load(bg + b, v0 + v);
      }
      sync();
#pragma unroll
      for (int u = 0; u < VPL; ++u) {
        const int v = u * 32 + lane;
        if (v < cv) {
#pragma unroll
          for (int i = 0; i < RPW; ++i) {
            float wf[8];
            unpack8(wv[i][u], wf);
#pragma unroll
            for (int b = 0; b < BATCH; ++b) {
              if (b < nb) {
                float xf[8];
                unpack8(xs[b * CHUNK_VECS + v], xf);
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[i][b] = fmaf(wf[e], xf[e], acc[i][b]);
              }
            }
          }
        }
      }
      sync();  // every warp is done with this chunk of x before the next one is staged
    }

#pragma unroll
    for (int i = 0; i < RPW; ++i) {
#pragma unroll
      for (int b = 0; b < BATCH; ++b) {
        float s = acc[i][b];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == b && b < nb) store(warp * RPW + i, bg, b, s);
      }
    }
    flush(bg, nb);
  }
}

// rows_from with W from global memory.
template <int WARPS, int ROWS, int KCHUNK, int BATCH, class Stage, class RowOf, class Store, class Flush, class Sync>
__device__ __forceinline__ void rows_staged(const bf16* __restrict__ w, const Stage& stage, int B, int K,
                                            uint4* __restrict__ xs, RowOf row_of, Store store, Flush flush,
                                            Sync sync) {
  rows_from<WARPS, ROWS, KCHUNK, BATCH>(WGlobal{w, K}, stage, B, K, xs, row_of, store, flush, sync);
}

// rows_staged with x staged as it is.
template <int WARPS, int ROWS, int KCHUNK, int BATCH, class RowOf, class Store, class Flush, class Sync>
__device__ __forceinline__ void rows_with(const bf16* __restrict__ w, const bf16* __restrict__ x, int B, int K,
                                          uint4* __restrict__ xs, RowOf row_of, Store store, Flush flush,
                                          Sync sync) {
  rows_staged<WARPS, ROWS, KCHUNK, BATCH>(w, StageRaw{x, K}, B, K, xs, row_of, store, flush, sync);
}

// The plain form: rows n0 .. n0 + ROWS - 1 of W (those below N), y[b, n] = s (+ r[b, n]), rounded once; W from
// `wsrc` (rows: from global memory).
template <int WARPS, int ROWS, int KCHUNK, int BATCH, bool kResidual, class WSrc, class Sync>
__device__ __forceinline__ void rows_src(int n0, const WSrc& wsrc, const bf16* __restrict__ x,
                                         const bf16* __restrict__ r, bf16* __restrict__ y, int B, int N, int K,
                                         uint4* __restrict__ xs, Sync sync) {
  rows_from<WARPS, ROWS, KCHUNK, BATCH>(
      wsrc, StageRaw{x, K}, B, K, xs, [=](int i) { return n0 + i < N ? n0 + i : -1; },
      [=](int i, int bg, int b, float s) {
        const int n = n0 + i;
        if (n < N) {
          const long long at = (long long)(bg + b) * N + n;
          if constexpr (kResidual) s += __bfloat162float(__ldcg(r + at));  // r may be written in this launch
          y[at] = __float2bfloat16_rn(s);
        }
      },
      [](int, int) {}, sync);
}

template <int WARPS, int ROWS, int KCHUNK, int BATCH, bool kResidual, class Sync>
__device__ __forceinline__ void rows(int n0, const bf16* __restrict__ w, const bf16* __restrict__ x,
                                     const bf16* __restrict__ r, bf16* __restrict__ y, int B, int N, int K,
                                     uint4* __restrict__ xs, Sync sync) {
  rows_src<WARPS, ROWS, KCHUNK, BATCH, kResidual>(n0, WGlobal{w, K}, x, r, y, B, N, K, xs, sync);
}

}  // namespace gemv_body
