// A task's W through a two-slot shared-memory ring that the TMA unit fills (the `_ring` GEMVs). The prefetch
// entry runs before the task waits on its inputs and, under static dispatch, for the CTA's next task while
// this one runs: thread 0 starts bulk copies of the first K chunk of the task's first 8 rows (8 x KCHUNK bf16,
// 32 KB: one copy when they are consecutive rows of W and K == KCHUNK, else one a row) into slot
// iteration % 2 and arms the slot's mbarrier with the bytes; the entry waits on that mbarrier (phase
// (iteration / 2) % 2: a slot's fills alternate). gemv.cuh reads those rows from the slot at the mma and
// streams the task's other rows, and every later K chunk (down: K = 8192), from global memory in the same
// pass, so a 16-row task's chunk is one round trip to memory, not two, and two 32 KB slots leave two CTAs an
// SM. The slot's last reader is the task two before, which the glue's barrier ended before this prefetch.
#pragma once
#include "gemv.cuh"

namespace ring_body {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// The rows of a task a slot holds (its first ones): 8, an mma tile's half.
constexpr int kRingRows = 8;

// The task of the component's `iteration`-th tile on this CTA uses slot iteration % 2 of `ring`
// ([2][kRingRows][KCHUNK] bf16) and mbarrier iteration % 2 of `bars` (two in a row).
template <int KCHUNK>
__device__ __forceinline__ bf16* slot(bf16* ring, int iteration) {
  return ring + (long long)(iteration & 1) * kRingRows * KCHUNK;
}

// The prefetch entry (thread 0): the first chunk of the task's first kRingRows rows into its slot, completing
// on its mbarrier.
template <int ROWS, int KCHUNK, class RowOf>
__device__ __forceinline__ void fill(const bf16* __restrict__ w, int K, RowOf row_of, bf16* ring,
                                     unsigned long long* bars, int iteration) {
  if (threadIdx.x != 0) return;
  constexpr int SLOT_ROWS = ROWS < kRingRows ? ROWS : kRingRows;
  bf16* const dst = slot<KCHUNK>(ring, iteration);
  unsigned long long* const bar = bars + (iteration & 1);
  const unsigned row_bytes = (unsigned)min(K, KCHUNK) * 2u;  // K is a multiple of 8: 16-byte multiples
  unsigned total = 0;
#pragma unroll
  for (int i = 0; i < SLOT_ROWS; ++i) total += row_of(i) >= 0 ? row_bytes : 0u;
  // The slot's bytes were last written and read by ordinary loads and stores (this component's or, between
  // calls, another's scratch): order them before the bulk copies write.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(total) : "memory");
  // Consecutive rows of W that land in consecutive slot rows are one copy when W's rows are as long as the
  // slot's (K == KCHUNK): the slot of an LM head or output projection task is one 32 KB copy, not eight.
  const bool whole_rows = K == KCHUNK;
  for (int i = 0; i < SLOT_ROWS;) {
    const int n = row_of(i);
    int run = 1;
    if (n >= 0 && whole_rows)
      while (i + run < SLOT_ROWS && row_of(i + run) == n + run) ++run;
    if (n >= 0)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(smem_u32(dst + (long long)i * KCHUNK)), "l"(w + (long long)n * K), "r"(run * row_bytes),
                   "r"(smem_u32(bar))
                   : "memory");
    i += run;
  }
}

__device__ __forceinline__ void wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
}

// gemv.cuh's W source: the first K chunk of the task's first kRingRows rows from the slot (after the fill
// landed), everything else from global memory.
template <int KCHUNK>
struct WRing {
  static constexpr int kSlotRows = kRingRows;
  static constexpr bool kLoaderRing = false;
  const bf16* w;
  int K;
  const uint4* slot_base;  // [kRingRows][KCHUNK / 8]
  unsigned long long* bar;
  unsigned parity;
  __device__ __forceinline__ void begin() const { wait(bar, parity); }
  __device__ __forceinline__ uint4 load(int, int n, int v0, int v) const {
    return gemv_body::load_stream(w + (long long)n * K + (long long)(v0 + v) * 8);
  }
  __device__ __forceinline__ uint4 slot(int local, int v) const { return slot_base[local * (KCHUNK / 8) + v]; }
};

// The entry's W source for the task: its slot, once its mbarrier completed this slot's (iteration / 2)-th fill.
template <int ROWS, int KCHUNK>
__device__ __forceinline__ WRing<KCHUNK> source(const bf16* w, int K, bf16* ring, unsigned long long* bars,
                                                int iteration) {
  return WRing<KCHUNK>{w, K, reinterpret_cast<const uint4*>(slot<KCHUNK>(ring, iteration)),
                       bars + (iteration & 1), (unsigned)(iteration >> 1) & 1u};
}

}  // namespace ring_body
