// argmax_merge: the second half of the greedy-decoding head. Task b starts once every lm_head task has
// written its key (the wait on partials), takes the maximum of the ceil_div(V, LM_ROWS) keys of batch
// row b (each thread a strided share, then the warps' shuffles, then the 8 warp maxima in shared memory)
// and writes token[b], the index of the largest bf16 logit, the lowest index among equal ones. The keys
// were written in this launch by other CTAs: loads through L2 (__ldcg), never the read-only cache. The
// maximum of unsigned words does not depend on the order it is taken in: the result is deterministic.
#include "argmax_merge.pipelink.h"
#include "argmax.cuh"

using namespace pl::argmax_merge;
static_assert(smem_best_bytes >= WARPS * 8, "contract argmax_merge: smem.buffers.best is too small");

extern "C" __device__ void argmax_merge(pl::Tile tile, const unsigned long long* __restrict__ part,
                                        int* __restrict__ token, int B, int V) {
  const int b = tile.coord[0];
  const int tasks = (V + LM_ROWS() - 1) / LM_ROWS();
  const int t = thread_rank(), warp = warp_rank(), lane = pl::lane_index();
  const unsigned long long* row = part + (long long)b * tasks;
  unsigned long long best = 0ull;
  for (int i = t; i < tasks; i += THREADS) best = max(best, __ldcg(row + i));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, off));
  unsigned long long* shared = smem_best<unsigned long long>();
  if (lane == 0) shared[warp] = best;
  sync_reduce();
  if (t == 0) {
    unsigned long long all = 0ull;
#pragma unroll
    for (int i = 0; i < WARPS; ++i) all = max(all, shared[i]);
    token[b] = argmax_key::index(all);
  }
  sync_reduce();  // thread 0 has read the warp maxima before the next task on this CTA writes them
}
