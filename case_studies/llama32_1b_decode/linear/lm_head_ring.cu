// lm_head_ring: lm_head (lm_head.cu) with W through ring.cuh's two-slot shared-memory ring: the prefetch entry
// starts the task's bulk copies of its first 8 vocabulary rows before the task waits (and, under static
// dispatch, while the CTA's previous task runs); the entry reads them from the slot, its other rows from memory.
#include "lm_head_ring.pipelink.h"
#include "lm_head.cuh"
#include "ring.cuh"

using namespace pl::lm_head_ring;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract lm_head_ring: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, LM_ROWS> * 4, "contract lm_head_ring: smem.buffers.sums is too small");
static_assert(smem_keys_bytes >= GEMV_BATCH * LM_ROWS * 8, "contract lm_head_ring: smem.buffers.keys is too small");
static_assert(smem_ring_bytes >= 2 * ring_body::kRingRows * GEMV_KCHUNK * 2, "contract lm_head_ring: smem.buffers.ring is too small");


extern "C" __device__ void lm_head_ring_prefetch(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                                 const __nv_bfloat16* __restrict__, __nv_bfloat16* __restrict__,
                                                 unsigned long long* __restrict__, int, int V, int K) {
  const int n0 = tile.coord[0] * LM_ROWS;
  ring_body::fill<LM_ROWS, GEMV_KCHUNK>(w, K, [=](int i) { return n0 + i < V ? n0 + i : -1; },
                                          smem_ring<__nv_bfloat16>(), mbar_loaded(), tile.iteration);
}

extern "C" __device__ void lm_head_ring(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                        const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ logits,
                                        unsigned long long* __restrict__ part, int B, int V, int K) {
  const auto wsrc = ring_body::source<LM_ROWS, GEMV_KCHUNK>(w, K, smem_ring<__nv_bfloat16>(), mbar_loaded(),
                                                               tile.iteration);
  lm_head_body::task<WARPS, LM_ROWS, GEMV_KCHUNK, GEMV_BATCH>(tile.coord[0], wsrc, x, logits, part, B, V, K,
                                                                smem_xs<uint4>(), smem_keys<unsigned long long>(),
                                                                smem_sums<float>(), tile.continues, [] { sync_stage(); });
}
