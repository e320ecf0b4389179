// gemv_residual_lr_pieces: gemv_residual_lr (gemv_residual_lr.cu) for an x written in pieces by another call of the
// launch (the MLP's h, by gate/up): the entry waits for the pieces itself (the contract's in-entry wait h_piece) and
// stages x's columns as far as they are ready before each slot of W it multiplies (gemv.cuh's stage_pieces).
#include "gemv_residual_lr_pieces.pipelink.h"
#include "gemv.cuh"

using namespace pl::gemv_residual_lr_pieces;
using Ring = gemv_body::WLoaderRing<GEMV_ROWS, GEMV_RING_K>;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract gemv_residual_lr_pieces: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, GEMV_ROWS> * 4, "contract gemv_residual_lr_pieces: smem.buffers.sums is too small");
static_assert(smem_met_bytes >= 2 * sizeof(int), "contract gemv_residual_lr_pieces: smem.buffers.met is too small");
static_assert(GEMV_ROWS * GEMV_RING_K * 2 == Ring::kSlotBytes, "contract gemv_residual_lr_pieces: loader.slot_bytes is not the slot's");

extern "C" __device__ void gemv_residual_lr_pieces_load(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                        const __nv_bfloat16* __restrict__, const __nv_bfloat16* __restrict__,
                                                        __nv_bfloat16* __restrict__, int B, int N, int K) {
  gemv_body::load_slots<GEMV_ROWS, GEMV_RING_K, GEMV_BATCH>(tile, w, tile.coord[0], B, K, LR_L2_ASKS());
}

// The in-entry wait h_piece, as gemv.cuh's stage_pieces asks for it.
struct HPieces {
  __device__ __forceinline__ static long long elements() { return h_piece_elements(); }
  __device__ __forceinline__ static int cols() { return H_PIECE(); }
  __device__ __forceinline__ static int* met() { return smem_met<int>(); }
  __device__ __forceinline__ static long long first_unmet(long long i0, long long i1, long long step) {
    return first_unmet_h_piece(i0, i1, step);
  }
  __device__ __forceinline__ static bool wait(long long i) { return wait_h_piece(i); }
};

extern "C" __device__ void gemv_residual_lr_pieces(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                   const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* r,
                                                   __nv_bfloat16* y, int B, int N, int K) {
  gemv_body::rows_src<WARPS, GEMV_ROWS, GEMV_KCHUNK, GEMV_BATCH, true>(
      tile.coord[0] * GEMV_ROWS, Ring{tile}, gemv_body::StageRaw{x, K}, r, y, B, N, K, smem_xs<uint4>(),
      smem_sums<float>(), tile.continues, [] { sync_stage(); }, gemv_body::XPieces<HPieces>{});
}
