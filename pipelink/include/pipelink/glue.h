// pipelink glue support: what the generated fused entry uses (mbarrier rings, role dispatch).
// Plain CUDA C++ with no standard-library includes, so NVRTC compiles it.
#pragma once
#include <pipelink/component.h>

namespace pl {
namespace glue {

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned long long* mbarrier_at(unsigned offset) {
  return reinterpret_cast<unsigned long long*>(pl::dynamic_smem() + offset);
}

__device__ __forceinline__ void mbarrier_init(unsigned offset, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(mbarrier_at(offset))), "r"(arrivals)
               : "memory");
}

// Make the initialized mbarriers visible before any thread uses them.
__device__ __forceinline__ void mbarrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// Release: everything this thread wrote to shared memory is visible to whoever waits on the phase.
__device__ __forceinline__ void mbarrier_arrive(unsigned offset) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_address(mbarrier_at(offset)))
               : "memory");
}

__device__ __forceinline__ bool mbarrier_try_wait(unsigned offset, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_address(mbarrier_at(offset))), "r"(parity)
      : "memory");
  return done != 0;
}

// Acquire: waits until the phase with this parity has completed.
__device__ __forceinline__ void mbarrier_wait(unsigned offset, unsigned parity) {
  while (!mbarrier_try_wait(offset, parity)) {
  }
}

__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

// --- stream-K: a tile's reduction blocks split over CTAs -------------------------------------
// A CTA walks its whole tiles first (tiles blockIdx.x, + gridDim.x, ... below dp_tiles), then an
// equal share of the reduction blocks of the last `sk_tiles` tiles, cut at tile boundaries into
// pieces. A tile's first piece belongs to the lowest CTA that covers it, and is that CTA's last
// unit; every later piece is some CTA's first unit, computed before anything else it does. So the
// first piece waits only for work that started at launch (every CTA is resident), and each CTA
// leaves at most one partial: slot blockIdx.x.
struct StreamKWalk {
  int blocks;        // reduction blocks per tile
  int dp_tiles;      // tiles walked whole
  int dp_units;      // of them, this CTA's
  unsigned sk_blocks;  // blocks of the stream-K region (sk_tiles * blocks)
  unsigned sk_begin;   // this CTA's share of them: [sk_begin, sk_end)
  unsigned sk_end;
};

// 32-bit on purpose (the consumer holds a whole accumulator tile in registers): the launcher splits
// only while sk_blocks * gridDim.x fits 32 bits (streamk.py).
__device__ __forceinline__ unsigned sk_share(unsigned sk_blocks, unsigned cta) { return sk_blocks * cta / gridDim.x; }

__device__ __forceinline__ StreamKWalk stream_k_walk(int num_tiles, int blocks, int sk_tiles) {
  StreamKWalk w;
  w.blocks = blocks;
  w.dp_tiles = num_tiles - sk_tiles;
  w.dp_units = w.dp_tiles > (int)blockIdx.x ? (w.dp_tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x : 0;
  w.sk_blocks = (unsigned)sk_tiles * (unsigned)blocks;
  w.sk_begin = sk_share(w.sk_blocks, blockIdx.x);
  w.sk_end = sk_share(w.sk_blocks, blockIdx.x + 1);
  return w;
}

// Unit `u` of this CTA's walk: its tile, block range and ring position; false past the last.
__device__ __forceinline__ bool stream_k_unit(const StreamKWalk& w, int u, int& t, Tile& tile) {
  if (u < w.dp_units) {
    t = (int)blockIdx.x + u * (int)gridDim.x;
    tile.k_begin = 0;
    tile.k_end = w.blocks;
    tile.k_first = u * w.blocks;
    return true;
  }
  const unsigned j = (unsigned)(u - w.dp_units), blocks = (unsigned)w.blocks;
  const unsigned g = j == 0 ? w.sk_begin : (w.sk_begin / blocks + j) * blocks;
  if (g >= w.sk_end) return false;
  t = w.dp_tiles + (int)(g / blocks);
  tile.k_begin = (int)(g % blocks);
  tile.k_end = (int)min(blocks, (unsigned)tile.k_begin + (w.sk_end - g));
  tile.k_first = w.dp_units * w.blocks + (int)(g - w.sk_begin);
  return true;
}

// A partial slot: 32 words of per-warp ready flags (1: the warp's sums are there), then each
// warp's fragment, float4 j of lane l at (j * 32 + l): 512 contiguous bytes per warp and store.
constexpr int kPartialFlagFloats = 32;

__device__ __forceinline__ unsigned* partial_flag(float* partials, int slot_floats, int cta, int warp) {
  return reinterpret_cast<unsigned*>(partials + (unsigned long long)cta * slot_floats) + warp;
}

__device__ __forceinline__ float4* partial_data(float* partials, int slot_floats, int cta, int warp, int elements) {
  return reinterpret_cast<float4*>(partials + (unsigned long long)cta * slot_floats + kPartialFlagFloats) + warp * 8 * elements;
}

// Leave this warp's partial sums in this CTA's slot, then raise its flag (release: the sums first).
template <int E>
__device__ __forceinline__ void partial_store(float* partials, int slot_floats, int warp, const float* frag) {
  static_assert(E % 4 == 0, "fragments travel as float4");
  const unsigned lane = threadIdx.x & 31u;
  float4* data = partial_data(partials, slot_floats, blockIdx.x, warp, E);
#pragma unroll
  for (int j = 0; j < E / 4; ++j)
    __stcg(data + j * 32 + lane, make_float4(frag[4 * j], frag[4 * j + 1], frag[4 * j + 2], frag[4 * j + 3]));
  __threadfence();
  __syncwarp();
  if (lane == 0)
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(partial_flag(partials, slot_floats, blockIdx.x, warp)),
                 "r"(1u) : "memory");
}

// Add CTA `cta`'s partial sums for this warp once its flag is up, and lower the flag again: a launch
// leaves every flag zero, so the next one (or a graph replay) needs no reset.
template <int E>
__device__ __forceinline__ void partial_add(float* partials, int slot_floats, int cta, int warp, float* frag) {
  const unsigned lane = threadIdx.x & 31u;
  unsigned* flag = partial_flag(partials, slot_floats, cta, warp);
  if (lane == 0) {
    unsigned up = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(up) : "l"(flag) : "memory");
    } while (up == 0);
  }
  __syncwarp();
  const float4* data = partial_data(partials, slot_floats, cta, warp, E);
#pragma unroll
  for (int j = 0; j < E / 4; ++j) {
    const float4 v = __ldcg(data + j * 32 + lane);
    frag[4 * j] += v.x;
    frag[4 * j + 1] += v.y;
    frag[4 * j + 2] += v.z;
    frag[4 * j + 3] += v.w;
  }
  __syncwarp();
  if (lane == 0) asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(0u) : "memory");
}

// The first piece of tile `t`: add the partials of the CTAs after this one whose first unit lies
// in the tile, in CTA order (the sum is the same for every run of the same launch shape).
template <int E>
__device__ __forceinline__ void partial_gather(const StreamKWalk& w, int t, float* partials, int slot_floats, int warp,
                                               float* frag) {
  const unsigned tile_end = (unsigned)(t - w.dp_tiles + 1) * (unsigned)w.blocks;
  unsigned begin = w.sk_end;  // the next CTA's share starts where this one's ends
  for (unsigned c = blockIdx.x + 1; c < gridDim.x && begin < tile_end; ++c) {
    const unsigned end = sk_share(w.sk_blocks, c + 1);
    if (begin < end) partial_add<E>(partials, slot_floats, (int)c, warp, frag);
    begin = end;
  }
}

}  // namespace glue
}  // namespace pl
