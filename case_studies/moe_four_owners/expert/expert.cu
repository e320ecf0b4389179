// moe_expert: one tile of the grouped expert GEMMs. Tile i holds EXPERT_TILE_M rows of one expert
// (tile_expert[i]); each row is a token of x (row_token, -1 for padding, zero-filled).
//   phase 1: h = silu(x Wg^T) * (x Wu^T) for the I columns, 64 at a time, kept in shared memory as bf16
//   phase 2: ys = h Wd^T for the H columns, 64 at a time, written as bf16
// bf16 tensor-core MMA (wmma 16x16x16, fp32 accumulation). Operands stream through a ring of
// EXPERT_STAGES cp.async stages of K = 64; each warp owns one 16-column slice of the 64 columns.
#include <cuda_bf16.h>
#include <mma.h>
#ifdef MOE_CLASSIC
#include "classic.h"
#else
#include "moe_expert.pipelink.h"
#endif

using namespace pl::moe_expert;
using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int BM = EXPERT_TILE_M;
constexpr int kN = 64, kK = 64, kLd = kK + 8;  // chunk sizes; staged rows are padded against bank conflicts
constexpr int kLdh = EXPERT_MAX_INTER + 8;
constexpr int kLdc = kN + 4;                   // f32 epilogue pitch
constexpr int kFragsM = BM / 16;
constexpr int kStageElems = (BM + 2 * kN) * kLd;  // x rows, then two weight blocks of kN rows
static_assert(BM % 16 == 0 && BM >= 16, "EXPERT_TILE_M: whole 16-row MMA fragments");
static_assert(WARPS * 16 == kN, "one 16-column slice per warp");
static_assert(EXPERT_STAGES >= 2, "a ring needs two stages");
static_assert(kStageElems * 2 * EXPERT_STAGES <= smem_stages_bytes, "contract: smem.buffers.stages too small");
static_assert(BM * kLdh * 2 <= smem_h_bytes, "contract: smem.buffers.h too small");
static_assert(BM * 4 <= smem_tokens_bytes, "contract: smem.buffers.tokens too small");
static_assert(2 * BM * kLdc * 4 <= smem_stages_bytes, "the epilogue reuses the stages");

namespace {

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

}  // namespace

extern "C" __device__ void moe_expert(pl::Tile tile, const bf16* __restrict__ x, const bf16* __restrict__ w_gate,
                                      const bf16* __restrict__ w_up, const bf16* __restrict__ w_down,
                                      const int* __restrict__ row_token, const int* __restrict__ tile_expert,
                                      const int* __restrict__ tile_rows, bf16* __restrict__ ys, int T, int H, int I, int E,
                                      int TOPK) {
  const int i = tile.coord[0];
  const int e = tile_expert[i];
  if (e < 0) return;  // past the last used tile
  const int rows = tile_rows[i];
  const long long row0 = (long long)i * BM;
  bf16* const ring = smem_stages<bf16>();
  bf16* const h = smem_h<bf16>();
  float* const cg = smem_stages<float>();  // epilogue, after the ring is drained
  float* const cu = cg + BM * kLdc;
  const int warp = warp_rank();
  int* const token = smem_tokens<int>();
  for (int r = thread_rank(); r < BM; r += THREADS) token[r] = r < rows ? row_token[row0 + r] : -1;
  __syncthreads();

  const bf16* const wg = w_gate + (long long)e * I * H;
  const bf16* const wu = w_up + (long long)e * I * H;
  const bf16* const wd = w_down + (long long)e * H * I;

  // ---- phase 1: h[:, n0:n0+64] = silu(x Wg^T) * (x Wu^T)
  for (int n0 = 0; n0 < I; n0 += kN) {
    const int steps = H / kK;
    auto load = [&](int step) {
      bf16* s = ring + (step % EXPERT_STAGES) * kStageElems;
      const int k0 = step * kK;
      stage_rows<BM>(s, [&](int r) { return token[r] >= 0 ? x + (long long)token[r] * H + k0 : nullptr; }, x);
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
      const bf16* s = ring + (step % EXPERT_STAGES) * kStageElems;
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
      wmma::store_matrix_sync(cg + 16 * f * kLdc + 16 * warp, accg[f], kLdc, wmma::mem_row_major);
      wmma::store_matrix_sync(cu + 16 * f * kLdc + 16 * warp, accu[f], kLdc, wmma::mem_row_major);
    }
    __syncthreads();
    for (int v = thread_rank(); v < BM * kN; v += THREADS) {
      const int r = v / kN, c = v % kN;
      const float g = cg[r * kLdc + c], u = cu[r * kLdc + c];
      h[r * kLdh + n0 + c] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
    }
    __syncthreads();
  }

  // ---- phase 2: ys[:, n0:n0+64] = h Wd^T
  for (int n0 = 0; n0 < H; n0 += kN) {
    const int steps = I / kK;
    auto load = [&](int step) {
      bf16* s = ring + (step % EXPERT_STAGES) * kStageElems;
      stage_rows<kN>(s, [&](int r) { return wd + (long long)(n0 + r) * I + step * kK; }, x);
    };
    Acc acc[kFragsM];
    for (int f = 0; f < kFragsM; ++f) wmma::fill_fragment(acc[f], 0.0f);
    for (int s = 0; s < EXPERT_STAGES - 1; ++s) {
      if (s < steps) load(s);
      cp_async_commit();
    }
    for (int step = 0; step < steps; ++step) {
      cp_async_wait<EXPERT_STAGES - 2>();
      __syncthreads();
      if (step + EXPERT_STAGES - 1 < steps) load(step + EXPERT_STAGES - 1);
      cp_async_commit();
      const bf16* s = ring + (step % EXPERT_STAGES) * kStageElems;
#pragma unroll
      for (int kk = 0; kk < kK; kk += 16) {
        FragB b;
        wmma::load_matrix_sync(b, s + 16 * warp * kLd + kk, kLd);
#pragma unroll
        for (int f = 0; f < kFragsM; ++f) {
          FragA a;
          wmma::load_matrix_sync(a, h + 16 * f * kLdh + step * kK + kk, kLdh);
          wmma::mma_sync(acc[f], a, b, acc[f]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();
    for (int f = 0; f < kFragsM; ++f)
      wmma::store_matrix_sync(cg + 16 * f * kLdc + 16 * warp, acc[f], kLdc, wmma::mem_row_major);
    __syncthreads();
    for (int v = thread_rank(); v < rows * (kN / 2); v += THREADS) {
      const int r = v / (kN / 2), c = 2 * (v % (kN / 2));
      *reinterpret_cast<__nv_bfloat162*>(ys + (row0 + r) * H + n0 + c) =
          __floats2bfloat162_rn(cg[r * kLdc + c], cg[r * kLdc + c + 1]);
    }
    __syncthreads();
  }
}
