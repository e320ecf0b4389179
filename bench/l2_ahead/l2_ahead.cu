// Can L2 carry a weight stream across the latency-bound stretches of a decode layer? A persistent kernel, one CTA
// an SM, shaped as the loader-ring decode step: 8 compute warps and one loader warp, a ring of SLOTS slots of
// 32 KB filled by bulk copies (cp.async.bulk, mbarriers) and drained by the compute warps. A round is a layer:
// calls in order, each after an all-to-all hand-off (the glue's counter protocol: barrier, fence, add, one
// thread polling, barrier, the vector staged past L1); a call with bytes drains that many bytes of W a CTA from
// the ring, a call without (attention, the merge) runs a chain of dependent loads instead. The loader walks the
// rounds' W independently of the hand-offs, so while the latency calls run the ring fills and the loader waits.
//
// With `ahead_bytes` > 0 the loader, while the next slot is not free, asks L2 for the W past what it has copied,
// one slot's bytes at a time and the slot tested again between two (the pipeline's load_ahead, in its current
// form), up to ahead_bytes past the copy position. `ahead_kind`: 1 a bulk request (cp.async.bulk.prefetch.L2),
// 2 a prefetch.global.L2::evict_last per 128-byte line (the loader's 32 lanes), 3 the same without the hint.
// `copy_policy` 1: the ring's copies leave L2 first (an evict_first cache hint), 0: no hint.
//
// What it tells: whether W asked of L2 during the latency calls comes out of L2 later at less than its HBM cost,
// and how much the latency calls slow beside the requests (CTA 0 stamps each call's start and end).
#include <cstdint>

#include <pipelink/events.h>  // the glue's acquire load of a counter

namespace {

constexpr int kCompute = 256, kThreads = kCompute + 32, kWords = 8, kMaxN = 4096;
constexpr unsigned kSlotBytes = 32768u;

// The launch's arguments, gathered once from the kernel's parameters.
struct Params {
  const uint4* w;                 // the weight stand-in: word i is i * 2654435761 (mod 2^32)
  long long w_bytes;              // its size (a multiple of kSlotBytes)
  unsigned* x;                    // [2][n] hand-off words (round parity)
  unsigned long long* counter;    // zero at launch
  const unsigned* x0;             // [n] the first vector
  const unsigned* chase;          // a cyclic permutation: the latency calls' dependent loads
  unsigned* sink;                 // [ctas] each CTA's sum of the W words it drained
  unsigned long long* stamps;     // [rounds][calls][2] CTA 0's call start (hand-off met) and end, globaltimer ns
  int rounds, calls;
  const int* call_bytes;          // [calls] W bytes a CTA of each call (a multiple of kSlotBytes); 0: a latency
                                  // call; -1: an empty one (the hand-off alone)
  int lat_loads;                  // dependent loads of a latency call
  int slots;                      // the ring's slots
  int ahead_bytes, ahead_kind, copy_policy;
};

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ bool test_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
               " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0u;
}
__device__ __forceinline__ void wait_bar(unsigned bar, unsigned parity) {
  unsigned done = 0u;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void compute_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kCompute) : "memory"); }

// Byte offset in W of (round, CTA)'s bytes: each round's CTAs read disjoint, consecutive stretches, wrapping
// around the buffer (it is larger than L2 many times over).
__device__ __forceinline__ long long region(const Params& p, int round, long long per_round) {
  if (per_round == 0) return 0;  // no call streams
  const long long stretch = ((long long)round * gridDim.x + blockIdx.x) * per_round;
  return stretch % (p.w_bytes / per_round * per_round);
}

__device__ __forceinline__ void ask_l2(const Params& p, const unsigned char* src) {
  if (p.ahead_kind == 1) {
    if (threadIdx.x % 32 == 0)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(kSlotBytes) : "memory");
  } else {
    for (unsigned off = (threadIdx.x % 32) * 128u; off < kSlotBytes; off += 32u * 128u) {
      if (p.ahead_kind == 2)
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(src + off) : "memory");
      else
        asm volatile("prefetch.global.L2 [%0];" ::"l"(src + off) : "memory");
    }
  }
}

// The loader warp: every slot of every call of every round, in order; lane 0 copies. While the next slot is not
// free, W past the copy position is asked of L2, one slot at a time, up to ahead_bytes on.
__device__ void loader(const Params& p, unsigned char* ring, unsigned bars, long long per_round) {
  unsigned long long policy = 0ull;
  if (p.copy_policy) asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  unsigned pos = 0u;
  long long asked = 0;  // bytes of the whole walk asked of L2 so far (the walk's own order)
  long long walked = 0;
  for (int r = 0; r < p.rounds; ++r) {
    const long long base = region(p, r, per_round);
    long long in_round = 0;
    for (int c = 0; c < p.calls; ++c) {
      for (int b = 0; b < p.call_bytes[c]; b += kSlotBytes, ++pos, in_round += kSlotBytes, walked += kSlotBytes) {  // none for 0, -1
        const unsigned idx = pos % (unsigned)p.slots, parity = ((pos / (unsigned)p.slots) & 1u) ^ 1u;
        const unsigned empty = bars + 8u * ((unsigned)p.slots + idx), full = bars + 8u * idx;
        if (p.ahead_bytes > 0) {
          if (asked < walked + kSlotBytes) asked = walked + kSlotBytes;
          while (asked < walked + p.ahead_bytes && !test_wait(empty, parity)) {
            // the byte `asked` of the walk: in this round or the next (a walk's bytes are consecutive per round)
            const long long round_of = asked / per_round, at = asked % per_round;
            if (round_of >= p.rounds) break;
            ask_l2(p, reinterpret_cast<const unsigned char*>(p.w) + region(p, (int)round_of, per_round) + at);
            asked += kSlotBytes;
            __syncwarp();
          }
        }
        wait_bar(empty, parity);
        if (threadIdx.x % 32 == 0) {
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(full), "r"(kSlotBytes) : "memory");
          const unsigned dst = smem_u32(ring) + idx * kSlotBytes;
          const void* src = reinterpret_cast<const unsigned char*>(p.w) + base + in_round;
          if (p.copy_policy)
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], "
                         "%2, [%3], %4;" ::"r"(dst), "l"(src), "r"(kSlotBytes), "r"(full), "l"(policy) : "memory");
          else
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(dst), "l"(src), "r"(kSlotBytes), "r"(full) : "memory");
        }
        __syncwarp();
      }
    }
  }
}

__device__ __forceinline__ unsigned word_of(unsigned sum, int r, int i) { return sum * 2654435761u + (unsigned)(r * 131 + i); }

__device__ unsigned block_sum(const unsigned* xs, int n, unsigned* red) {
  unsigned s = 0u;
  for (int i = threadIdx.x; i < n; i += kCompute) s += xs[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  compute_sync();
  unsigned t = 0u;
  for (int i = 0; i < kCompute / 32; ++i) t += red[i];
  compute_sync();
  return t;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1)
layer_rounds(const uint4* w, long long w_bytes, unsigned* x, unsigned long long* counter, const unsigned* x0,
             const unsigned* chase, unsigned* sink, unsigned long long* stamps, int rounds, int calls,
             const int* call_bytes, int lat_loads, int slots, int ahead_bytes, int ahead_kind, int copy_policy) {
  const Params p{w, w_bytes, x, counter, x0, chase, sink, stamps, rounds, calls, call_bytes, lat_loads, slots,
                 ahead_bytes, ahead_kind, copy_policy};
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ unsigned xs[kMaxN];
  __shared__ unsigned red[kCompute / 32];
  __shared__ __align__(8) unsigned long long ring_bars[64];
  unsigned char* ring = smem;
  const unsigned bars = smem_u32(ring_bars);
  long long per_round = 0;
  for (int c = 0; c < p.calls; ++c) per_round += max(p.call_bytes[c], 0);
  if (threadIdx.x == 0) {
    for (int i = 0; i < p.slots; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bars + 8u * i) : "memory");                  // full
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bars + 8u * (p.slots + i)), "r"(kCompute) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x >= kCompute) {
    loader(p, ring, bars, per_round);
    return;
  }
  const int producers = gridDim.x, n = producers * kWords, cta = blockIdx.x;
  for (int i = threadIdx.x; i < n; i += kCompute) xs[i] = p.x0[i];
  compute_sync();
  unsigned folded = 0u;
  unsigned pos = 0u;
  int handoff = 0;
  unsigned chased = (unsigned)cta;
  for (int r = 0; r < p.rounds; ++r) {
    for (int c = 0; c < p.calls; ++c) {
      ++handoff;  // the hand-off before call c: every CTA's words of the call before
      const unsigned sum = block_sum(xs, n, red);
      unsigned* out = p.x + (handoff & 1) * n;
      if (threadIdx.x < kWords) out[cta * kWords + threadIdx.x] = word_of(sum, handoff, cta * kWords + threadIdx.x);
      compute_sync();
      if (threadIdx.x == 0) {
        const unsigned long long want = (unsigned long long)producers * handoff;
        __threadfence();
        pl::events::add_one(p.counter);
        while (pl::events::load_acquire(p.counter) < want) __nanosleep(64);
      }
      compute_sync();
      for (int i = threadIdx.x; i < n; i += kCompute) xs[i] = __ldcg(out + i);
      compute_sync();
      if (cta == 0 && threadIdx.x == 0) p.stamps[(r * p.calls + c) * 2] = now_ns();
      if (p.call_bytes[c] == 0) {  // a latency call: one thread's chain of dependent loads, the block waits
        if (threadIdx.x == 0)
          for (int i = 0; i < p.lat_loads; ++i) chased = __ldcg(p.chase + chased);
      } else {  // a stream call (an empty one drains nothing)
        for (int b = 0; b < p.call_bytes[c]; b += kSlotBytes, ++pos) {
          const unsigned idx = pos % (unsigned)p.slots;
          wait_bar(bars + 8u * idx, (pos / (unsigned)p.slots) & 1u);
          const uint4* s = reinterpret_cast<const uint4*>(ring + idx * kSlotBytes);
#pragma unroll
          for (int v = 0; v < (int)(kSlotBytes / 16u / kCompute); ++v) {
            const uint4 q = s[v * kCompute + threadIdx.x];
            folded += q.x + q.y + q.z + q.w;
          }
          asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bars + 8u * (p.slots + idx)) : "memory");
        }
      }
      compute_sync();
      if (cta == 0 && threadIdx.x == 0) p.stamps[(r * p.calls + c) * 2 + 1] = now_ns();
    }
  }
  folded += chased == 0xFFFFFFFFu ? 1u : 0u;  // keeps the chase (its values are below 2^22)
  for (int o = 16; o > 0; o >>= 1) folded += __shfl_xor_sync(0xffffffffu, folded, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = folded;
  compute_sync();
  if (threadIdx.x == 0) {
    unsigned t = 0u;
    for (int i = 0; i < kCompute / 32; ++i) t += red[i];
    p.sink[cta] = t;
  }
}
