// rmsnorm: one row of x per task. Each thread owns 8 consecutive columns per pass (one 16-byte load);
// the warps' sums of squares meet in shared memory behind a named barrier; the row is then read again
// and written as bf16(x * rsqrt(mean(x^2) + eps) * weight), rounded once. x (the residual stream) is
// written by other CTAs of the same launch in a fused decode step: its loads go through L2 (ld.global.cg),
// never the read-only path; the weight is constant and may use it.
#include <cuda_bf16.h>
#include "rmsnorm.pipelink.h"

using namespace pl::rmsnorm;
using bf16 = __nv_bfloat16;
static_assert(WARPS * sizeof(float) <= smem_partials_bytes, "contract rmsnorm: smem.buffers.partials is too small");

namespace {

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}

}  // namespace

extern "C" __device__ void rmsnorm(pl::Tile tile, const bf16* __restrict__ x, const bf16* __restrict__ weight,
                                   bf16* __restrict__ xn, float eps, int B, int H) {
  const int b = tile.coord[0];
  const int t = thread_rank(), warp = warp_rank(), lane = pl::lane_index();
  const uint4* row = reinterpret_cast<const uint4*>(x + (long long)b * H);
  const uint4* w = reinterpret_cast<const uint4*>(weight);
  uint4* out = reinterpret_cast<uint4*>(xn + (long long)b * H);
  const int vecs = H / 8;

  float ss = 0.0f;
  for (int v = t; v < vecs; v += THREADS) {
    float f[8];
    unpack8(__ldcg(row + v), f);
#pragma unroll
    for (int i = 0; i < 8; ++i) ss = fmaf(f[i], f[i], ss);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  float* partials = smem_partials<float>();
  if (lane == 0) partials[warp] = ss;
  sync_reduce();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < WARPS; ++i) total += partials[i];
  sync_reduce();  // every warp has read the partials before the next task on this CTA writes them
  const float scale = rsqrtf(total / (float)H + eps);

  for (int v = t; v < vecs; v += THREADS) {
    float f[8], g[8];
    unpack8(__ldcg(row + v), f);
    unpack8(__ldg(w + v), g);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = f[i] * scale * g[i];
    out[v] = pack8(f);
  }
}
