// embed: the token embedding of one decode step, x[b, :] = table[token[b], :] (bf16 rows copied as they
// are). Task (b, c) copies columns c * EMBED_COLS .. + EMBED_COLS - 1 of batch row b: each thread one
// 16-byte vector. The table is constant for the launch and each row is read once: ld.global.nc, past L1.
// token may be the previous step's argmax written in the same launch: a coherent load (ld.global.cg).
// A token outside [0, V) writes a row of zeros.
#include <cuda_bf16.h>
#include "embed.pipelink.h"

using namespace pl::embed;
static_assert(EMBED_COLS == THREADS * 8, "contract embed: a task is one 16-byte vector per thread");

namespace {

__device__ __forceinline__ uint4 load_table(const __nv_bfloat16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

}  // namespace

extern "C" __device__ void embed(pl::Tile tile, const __nv_bfloat16* __restrict__ table,
                                 const int* __restrict__ token, __nv_bfloat16* __restrict__ x, int B, int V, int H) {
  const int b = tile.coord[0], c = tile.coord[1];
  const int v = c * THREADS + thread_rank();  // this thread's 16-byte vector of the row
  if (v >= H / 8) return;
  const int tok = __ldcg(token + b);
  const uint4 val = (tok >= 0 && tok < V) ? load_table(table + (long long)tok * H + (long long)v * 8)
                                          : make_uint4(0u, 0u, 0u, 0u);
  reinterpret_cast<uint4*>(x + (long long)b * H)[v] = val;
}
