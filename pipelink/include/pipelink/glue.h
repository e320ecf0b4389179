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

// A kernel with a loader warp: the compute warps (the first N threads) meet at barrier 0 without it, in place
// of __syncthreads (which would wait for the loader, busy in its own walk).
template <unsigned N>
__device__ __forceinline__ void compute_sync() {
  asm volatile("bar.sync 0, %0;" ::"n"(N) : "memory");
}
template <unsigned N>
__device__ __forceinline__ int compute_sync_and(int v) {
  unsigned all;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.s32 p, %1, 0;\nbar.red.and.pred q, 0, %2, p;\nselp.u32 %0, 1, 0, q;\n}"
               : "=r"(all) : "r"(v), "n"(N) : "memory");
  return all != 0u;
}
template <unsigned N>
__device__ __forceinline__ int compute_sync_or(int v) {
  unsigned any;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.s32 p, %1, 0;\nbar.red.or.pred q, 0, %2, p;\nselp.u32 %0, 1, 0, q;\n}"
               : "=r"(any) : "r"(v), "n"(N) : "memory");
  return any != 0u;
}

// A group of warps running a task of its own beside the block's other groups (threads.concurrent): group g
// (of N) meets at named barrier g + 1 with its `threads` threads (a multiple of 32). Each call below gets
// a constant id, picked by the group's index: an id that stays a register makes ptxas reserve all sixteen.
__device__ __forceinline__ bool barrier_and(unsigned id, unsigned threads, bool v) {
  unsigned all;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.and.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}"
               : "=r"(all) : "r"((unsigned)v), "r"(id), "r"(threads) : "memory");
  return all != 0u;
}
template <int N>
__device__ __forceinline__ void group_sync(unsigned group, unsigned threads) {
  if constexpr (N > 0) {
    if (group == N - 1) pl::barrier_sync(N, threads);
    else group_sync<N - 1>(group, threads);
  }
}
// Whether `v` holds for every thread of the calling group.
template <int N>
__device__ __forceinline__ bool group_and(bool v, unsigned group, unsigned threads) {
  if constexpr (N > 0) {
    return group == N - 1 ? barrier_and(N, threads, v) : group_and<N - 1>(v, group, threads);
  } else {
    return v;
  }
}

// --- split reductions: a tile's reduction blocks over several CTAs ----------------------------
// Two walks (the launcher picks, streamk.py). Stream-K: a CTA walks its whole tiles first (tiles
// blockIdx.x, + gridDim.x, ... below dp_tiles), then an equal share of the reduction blocks of the
// last `sk_tiles` tiles, cut at tile boundaries into pieces. A tile's first piece belongs to the
// lowest CTA that covers it, and is that CTA's last unit; every later piece is some CTA's first
// split unit. So the first piece waits only for work every (resident) CTA does before it waits
// itself, and each CTA leaves at most one partial: slot blockIdx.x.
// Split-K: every tile in `split` pieces of `piece` blocks (the last shorter), walked grid-stride
// piece-major (all tiles' first pieces, then their second, ...), so the CTAs of a wave work on the
// same blocks of neighbouring tiles and still share operand panels in L2. A tile's last piece adds
// the others, all earlier units; slot t * (split - 1) + piece.
struct StreamKWalk {  // four numbers: held in registers across the mainloop, the rest recomputed
  int blocks;     // reduction blocks per tile
  int num_tiles;
  int sk_tiles;   // stream-K: the last tiles, split over the CTAs
  int split;      // split-K: pieces per tile (1: stream-K, or whole tiles)
};

// 32-bit on purpose (the consumer holds a whole accumulator tile in registers): the launcher splits
// only while sk_blocks * gridDim.x fits 32 bits (streamk.py).
__device__ __forceinline__ unsigned sk_share(const StreamKWalk& w, unsigned cta) {
  return (unsigned)w.sk_tiles * (unsigned)w.blocks * cta / gridDim.x;
}
__device__ __forceinline__ int dp_tiles(const StreamKWalk& w) { return w.num_tiles - w.sk_tiles; }
__device__ __forceinline__ int dp_units(const StreamKWalk& w) {  // this CTA's whole tiles
  const int dp = dp_tiles(w);
  return dp > (int)blockIdx.x ? (dp - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x : 0;
}
__device__ __forceinline__ int split_piece(const StreamKWalk& w) { return (w.blocks + w.split - 1) / w.split; }

__device__ __forceinline__ StreamKWalk stream_k_walk(int num_tiles, int blocks, int sk_tiles, int split) {
  StreamKWalk w;
  w.blocks = blocks;
  w.num_tiles = num_tiles;
  w.split = split > 1 ? split : 1;
  w.sk_tiles = w.split > 1 ? 0 : sk_tiles;
  return w;
}

// Unit `u` of this CTA's walk: its tile, block range and ring position; false past the last.
__device__ __forceinline__ bool stream_k_unit(const StreamKWalk& w, int u, int& t, Tile& tile) {
  if (w.split > 1) {
    const int unit = (int)blockIdx.x + u * (int)gridDim.x;
    if (unit >= w.num_tiles * w.split) return false;
    const int p = unit / w.num_tiles, piece = split_piece(w);
    t = unit - p * w.num_tiles;
    tile.k_begin = p * piece;
    tile.k_end = min(w.blocks, tile.k_begin + piece);
    // Blocks walked before: u whole pieces, less what the last pieces among them lack.
    const int last_row = (w.split - 1) * w.num_tiles;  // the unit index of the first last piece
    const int first_last = last_row > (int)blockIdx.x ? (last_row - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x : 0;
    const int short_by = piece - (w.blocks - (w.split - 1) * piece);
    tile.k_first = u * piece - max(0, u - first_last) * short_by;
    return true;
  }
  const int whole = dp_units(w);
  if (u < whole) {
    t = (int)blockIdx.x + u * (int)gridDim.x;
    tile.k_begin = 0;
    tile.k_end = w.blocks;
    tile.k_first = u * w.blocks;
    return true;
  }
  const unsigned j = (unsigned)(u - whole), blocks = (unsigned)w.blocks;
  const unsigned begin = sk_share(w, blockIdx.x), end = sk_share(w, blockIdx.x + 1);
  const unsigned g = j == 0 ? begin : (begin / blocks + j) * blocks;
  if (g >= end) return false;
  t = dp_tiles(w) + (int)(g / blocks);
  tile.k_begin = (int)(g % blocks);
  tile.k_end = (int)min(blocks, (unsigned)tile.k_begin + (end - g));
  tile.k_first = whole * w.blocks + (int)(g - begin);
  return true;
}

// A piece that leaves its partial sums for another (and skips the tile's consumers): stream-K's
// later pieces, split-K's all but the last. Its slot.
__device__ __forceinline__ bool piece_stores(const StreamKWalk& w, const Tile& tile) {
  return w.split > 1 ? tile.k_end != w.blocks : tile.k_begin != 0;
}
__device__ __forceinline__ int piece_slot(const StreamKWalk& w, int t, const Tile& tile) {
  return w.split > 1 ? t * (w.split - 1) + tile.k_begin / split_piece(w) : (int)blockIdx.x;
}
// A piece that adds the others' partial sums before the tile's consumers run.
__device__ __forceinline__ bool piece_gathers(const StreamKWalk& w, const Tile& tile) {
  return w.split > 1 ? tile.k_begin != 0 : tile.k_end != w.blocks;
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
__device__ __forceinline__ void partial_store(float* partials, int slot_floats, int slot, int warp, const float* frag) {
  static_assert(E % 4 == 0, "fragments travel as float4");
  const unsigned lane = threadIdx.x & 31u;
  float4* data = partial_data(partials, slot_floats, slot, warp, E);
#pragma unroll
  for (int j = 0; j < E / 4; ++j)
    __stcg(data + j * 32 + lane, make_float4(frag[4 * j], frag[4 * j + 1], frag[4 * j + 2], frag[4 * j + 3]));
  __threadfence();
  __syncwarp();
  if (lane == 0)
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(partial_flag(partials, slot_floats, slot, warp)),
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

// The gathering piece of tile `t` adds the others' partials in a fixed order (the sum is the same
// for every run of the same launch shape): split-K the earlier pieces; stream-K the CTAs after this
// one whose first split unit lies in the tile.
template <int E>
__device__ __forceinline__ void partial_gather(const StreamKWalk& w, int t, float* partials, int slot_floats, int warp,
                                               float* frag) {
  if (w.split > 1) {
    for (int p = 0; p < w.split - 1; ++p) partial_add<E>(partials, slot_floats, t * (w.split - 1) + p, warp, frag);
    return;
  }
  const unsigned tile_end = (unsigned)(t - dp_tiles(w) + 1) * (unsigned)w.blocks;
  unsigned begin = sk_share(w, blockIdx.x + 1);  // the next CTA's share starts where this one's ends
  for (unsigned c = blockIdx.x + 1; c < gridDim.x && begin < tile_end; ++c) {
    const unsigned end = sk_share(w, c + 1);
    if (begin < end) partial_add<E>(partials, slot_floats, (int)c, warp, frag);
    begin = end;
  }
}

}  // namespace glue
}  // namespace pl
