// The expert MLP of one tile, in two phases over a range [c0, c1) of the intermediate columns, shared by
// moe_expert (the whole range, bf16 rows of ys) and moe_expert_split (one range per task, fp32 partial rows):
//   gate_up: h[:, 0:c1-c0] = silu(x Wg[c0:c1]^T) * (x Wu[c0:c1]^T), kept in shared memory as bf16
//   down:    for the H columns, kNd at a time: acc = h Wd[:, c0:c1]^T, handed to `store` in fp32
// bf16 tensor-core MMA (wmma 16x16x16, fp32 accumulation). Operands stream through a ring of
// EXPERT_STAGES cp.async stages of K = 64; in gate_up each warp owns one 16-column slice of 64 columns,
// in down two of 128: a down stage of Wd then fills the stage a gate_up stage of x, Wg and Wu fills (with
// 64 columns it was 8 KB, and a CTA streamed the down weights at half the rate of the gate/up ones).
// Include after `using namespace pl::<component>` (THREADS, WARPS, thread_rank, warp_rank, EXPERT_*) and a
// constexpr int kHCols: the columns h holds (the widest range a task takes).
#pragma once
#include <cuda_bf16.h>
#include <mma.h>

namespace expert_body {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int BM = EXPERT_TILE_M;
constexpr int kN = 64, kK = 64, kLd = kK + 8;  // chunk sizes; staged rows are padded against bank conflicts
constexpr int kNd = 2 * kN;                    // output columns of one down pass
constexpr int kDownSlices = kNd / (16 * WARPS);  // 16-column slices per warp in down
constexpr int kLdh = kHCols + 8;
constexpr int kLdc = kNd + 4;                  // f32 epilogue pitch (both phases)
constexpr int kFragsM = BM / 16;
constexpr int kStageElems = (BM + 2 * kN) * kLd;  // x rows, then two weight blocks of kN rows
static_assert(BM % 16 == 0 && BM >= 16, "EXPERT_TILE_M: whole 16-row MMA fragments");
static_assert(WARPS * 16 == kN, "one 16-column slice per warp");
static_assert(kNd <= BM + 2 * kN, "a down stage fits in a gate_up stage");
static_assert(EXPERT_STAGES >= 2, "a ring needs two stages");

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Copy `rows` rows of kK bf16 (row r at src + r * pitch) into smem rows of kLd; rows whose source
// is null are zero-filled.
template <int ROWS, class RowSrc>
__device__ __forceinline__ void stage_rows(bf16* dst, RowSrc row_src, const bf16* fallback) {
  constexpr int kVecs = kK / 8;
  for (int v = thread_rank(); v < ROWS * kVecs; v += THREADS) {
    const int r = v / kVecs, c = (v % kVecs) * 8;
    const bf16* src = row_src(r);
    cp_async16(dst + r * kLd + c, src ? src + c : fallback, src != nullptr);
  }
}

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Shared memory of a tile: the cp.async ring, h, the tokens of its rows, and the fp32 epilogue (in the ring).
struct Smem {
  bf16* ring;
  bf16* h;
  int* token;
  float* cg;
  float* cu;
};

// The tile's row tokens into smem (-1 for padding rows) before either phase.
__device__ __forceinline__ void load_tokens(const Smem& sm, const int* __restrict__ row_token, long long row0,
                                            int rows) {
  for (int r = thread_rank(); r < BM; r += THREADS) sm.token[r] = r < rows ? __ldcg(row_token + row0 + r) : -1;
  __syncthreads();
}

// h[:, n0 - c0 .. + 64] = silu(x Wg^T) * (x Wu^T) for the columns n0 of [c0, c1) (a multiple of 64 wide).
__device__ __forceinline__ void gate_up(const Smem& sm, const bf16* __restrict__ x, const bf16* __restrict__ wg,
                                        const bf16* __restrict__ wu, int H, int c0, int c1) {
  const int warp = warp_rank();
  for (int n0 = c0; n0 < c1; n0 += kN) {
    const int steps = H / kK;
    auto load = [&](int step) {
      bf16* s = sm.ring + (step % EXPERT_STAGES) * kStageElems;
      const int k0 = step * kK;
      stage_rows<BM>(s, [&](int r) { return sm.token[r] >= 0 ? x + (long long)sm.token[r] * H + k0 : nullptr; }, x);
      stage_rows<kN>(s + BM * kLd, [&](int r) { return wg + (long long)(n0 + r) * H + k0; }, x);
      stage_rows<kN>(s + (BM + kN) * kLd, [&](int r) { return wu + (long long)(n0 + r) * H + k0; }, x);
    };
    Acc accg[kFragsM], accu[kFragsM];
    for (int f = 0; f < kFragsM; ++f) wmma::fill_fragment(accg[f], 0.0f), wmma::fill_fragment(accu[f], 0.0f);
    for (int s = 0; s < EXPERT_STAGES - 1; ++s) {
      if (s < steps) load(s);
      cp_async_commit();
    }
    for (int step = 0; step < steps; ++step) {
      cp_async_wait<EXPERT_STAGES - 2>();
      __syncthreads();  // stage `step` landed for every thread; stage `step - 1` is free again
      if (step + EXPERT_STAGES - 1 < steps) load(step + EXPERT_STAGES - 1);
      cp_async_commit();
      const bf16* s = sm.ring + (step % EXPERT_STAGES) * kStageElems;
#pragma unroll
      for (int kk = 0; kk < kK; kk += 16) {
        FragB bg, bu;
        wmma::load_matrix_sync(bg, s + (BM + 16 * warp) * kLd + kk, kLd);
        wmma::load_matrix_sync(bu, s + (BM + kN + 16 * warp) * kLd + kk, kLd);
#pragma unroll
        for (int f = 0; f < kFragsM; ++f) {
          FragA a;
          wmma::load_matrix_sync(a, s + 16 * f * kLd + kk, kLd);
          wmma::mma_sync(accg[f], a, bg, accg[f]);
          wmma::mma_sync(accu[f], a, bu, accu[f]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();
    for (int f = 0; f < kFragsM; ++f) {
      wmma::store_matrix_sync(sm.cg + 16 * f * kLdc + 16 * warp, accg[f], kLdc, wmma::mem_row_major);
      wmma::store_matrix_sync(sm.cu + 16 * f * kLdc + 16 * warp, accu[f], kLdc, wmma::mem_row_major);
    }
    __syncthreads();
    for (int v = thread_rank(); v < BM * kN; v += THREADS) {
      const int r = v / kN, c = v % kN;
      const float g = sm.cg[r * kLdc + c], u = sm.cu[r * kLdc + c];
      sm.h[r * kLdh + n0 - c0 + c] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
    }
    __syncthreads();
  }
}

// For the H columns, kNd at a time: acc = h Wd[:, c0:c1]^T (K = c1 - c0, a multiple of 64); then
// store(n0, cols, cg) with the fp32 [BM][kLdc] block in shared memory (its first `cols` columns are
// n0.., the last pass's possibly fewer than kNd), on every thread (it must not sync).
template <class Store>
__device__ __forceinline__ void down(const Smem& sm, const bf16* __restrict__ wd, int H, int I, int c0, int c1,
                                     const bf16* fallback, Store store) {
  const int warp = warp_rank();
  for (int n0 = 0; n0 < H; n0 += kNd) {
    const int steps = (c1 - c0) / kK;
    auto load = [&](int step) {
      bf16* s = sm.ring + (step % EXPERT_STAGES) * kStageElems;
      stage_rows<kNd>(s, [&](int r) { return n0 + r < H ? wd + (long long)(n0 + r) * I + c0 + step * kK : nullptr; },
                      fallback);
    };
    Acc acc[kFragsM][kDownSlices];
    for (int f = 0; f < kFragsM; ++f)
      for (int j = 0; j < kDownSlices; ++j) wmma::fill_fragment(acc[f][j], 0.0f);
    for (int s = 0; s < EXPERT_STAGES - 1; ++s) {
      if (s < steps) load(s);
      cp_async_commit();
    }
    for (int step = 0; step < steps; ++step) {
      cp_async_wait<EXPERT_STAGES - 2>();
      __syncthreads();
      if (step + EXPERT_STAGES - 1 < steps) load(step + EXPERT_STAGES - 1);
      cp_async_commit();
      const bf16* s = sm.ring + (step % EXPERT_STAGES) * kStageElems;
#pragma unroll
      for (int kk = 0; kk < kK; kk += 16) {
        FragA a[kFragsM];
#pragma unroll
        for (int f = 0; f < kFragsM; ++f) wmma::load_matrix_sync(a[f], sm.h + 16 * f * kLdh + step * kK + kk, kLdh);
#pragma unroll
        for (int j = 0; j < kDownSlices; ++j) {
          FragB b;
          wmma::load_matrix_sync(b, s + 16 * (warp * kDownSlices + j) * kLd + kk, kLd);
#pragma unroll
          for (int f = 0; f < kFragsM; ++f) wmma::mma_sync(acc[f][j], a[f], b, acc[f][j]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();
    for (int f = 0; f < kFragsM; ++f)
      for (int j = 0; j < kDownSlices; ++j)
        wmma::store_matrix_sync(sm.cg + 16 * f * kLdc + 16 * (warp * kDownSlices + j), acc[f][j], kLdc,
                                wmma::mem_row_major);
    __syncthreads();
    store(n0, min(kNd, H - n0), static_cast<const float*>(sm.cg));
    __syncthreads();
  }
}

}  // namespace expert_body
