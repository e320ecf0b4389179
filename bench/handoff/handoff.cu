// Hand-off between every CTA of a persistent kernel and every other, two ways, timed per round: each round,
// CTA c (of all P) writes its 8 words of a vector x_r from all of x_{r-1}, which every CTA must have
// whole before its next round; a chain of all-to-all dependencies, as between the calls of a decode step.
//
//   counter: the words by plain stores, then (the glue's protocol) a barrier, one thread's fence and an add to a
//            counter; a waiter's one thread polls the counter (acquire, 64 ns sleeps), a barrier, then the block
//            stages all of x_r (loads past L1) and meets at a barrier.
//   release: the counter protocol with the fence folded into the add (`red.release.gpu`) and the poll relaxed,
//            one acquire fence once the count is seen.
//   spread:  the counter protocol with the count spread over 8 counters on lines of their own: CTA c adds to
//            counter c % 8, and a waiter's 8 lanes poll one each, so no one L2 line takes every CTA's add and
//            poll.
//   tagged:  each word stored with the round in the same 8 bytes (one 64-bit store: single-copy atomic); a waiter
//            stages x_r by loading every word until its tag is the round's: the data carries its event, no
//            fence, counter or poll before the staging.
//
// `stream` bytes of a large buffer a CTA a round, read past L1 and folded into the sum, stand for a GEMV's
// weight stream beside the hand-off (0: the hand-off alone). Values are integers so the host checks x exactly.
//
// Under a stream that runs through the hand-off (the decode step's loader warp keeps copying W while the
// compute warps wait), two more, each with a warp after the 8 compute warps that bulk-copies `stream` bytes at a
// time (the slot; two slots, both in flight) of the large buffer into shared memory, over and over, until the
// rounds are done (`stream` 0: that warp idles), then 4 waiter warps:
//   counter_bg: the counter protocol, its one polling thread among the compute warps (the waiter warps idle).
//               With a gap (gap_ns > 0) the stream warp sleeps that long after each slot lands before it refills
//               it: a slower stream, to ask how much background traffic a hand-off bears (each CTA's fills are
//               counted, so the host has the stream's rate).
//   waiter_bg:  the waiter warps wait for the count: lane 0 of each polls (relaxed loads, a fence.acq_rel by the
//               one that sees the count), warp i from i * 128 ns on, so a poll reaches L2 about every round trip
//               / 4 rather than once a round trip, and none of them holds the compute warps up: the poller that
//               sees it arrives on an mbarrier that the compute warps wait on; those still waiting for a load
//               come back later on their own. Warps, not lanes of one warp: a warp's diverged lanes need not
//               keep a load each in flight at once.
#include <cstdint>

#include <pipelink/events.h>  // the glue's acquire load of a counter

namespace {

constexpr int kThreads = 256, kWords = 8, kMaxN = 4096;

__device__ __forceinline__ unsigned long long ld_relaxed(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_cg(const unsigned* p) { return __ldcg(p); }

// The weight stand-in: `bytes` of buffer w for this CTA and round, 16 bytes a load past L1, folded to one word.
__device__ __forceinline__ unsigned stream_w(const uint4* __restrict__ w, long long w_vecs, int stream, int round,
                                             int cta, int ctas) {
  const int vecs = stream / 16;
  if (vecs == 0) return 0u;
  const long long base = ((long long)round * ctas + cta) * vecs % (w_vecs - vecs);
  unsigned acc = 0u;
  for (int i = threadIdx.x; i < vecs; i += kThreads) {
    uint4 v;
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(w + base + i));
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  return acc;
}

// Round r's words of CTA c from the staged x_{r-1} (its sum, the same in every CTA) and the round.
__device__ __forceinline__ unsigned word_of(unsigned sum, int r, int i) { return sum * 2654435761u + (unsigned)(r * 131 + i); }

// The block's sum of xs[0 .. n), in a fixed order (so every CTA gets the same).
__device__ unsigned block_sum(const unsigned* xs, int n, unsigned* red) {
  unsigned s = 0u;
  for (int i = threadIdx.x; i < n; i += kThreads) s += xs[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  unsigned t = 0u;
  for (int i = 0; i < kThreads / 32; ++i) t += red[i];
  __syncthreads();
  return t;
}

// Every CTA produces (a CTA that only read could still be reading round r when round r + 2 overwrites its
// buffer). x: [2][n] words (round parity), n = gridDim.x * 8; counter: one u64, zero at launch; x0 the round-0
// input [n]; sink: one word a CTA (keeps the stream's loads). kRelease: the add releases and the poll is
// relaxed, one acquire fence after it; else the glue's fence, add and acquire poll.
constexpr int kSpread = 8, kLineWords = 16;  // spread: 8 counters, 128 bytes apart

template <bool kRelease, bool kSpreadCount = false>
__device__ __forceinline__ void counter_protocol(unsigned* __restrict__ x, unsigned long long* __restrict__ counter,
                                                 const unsigned* __restrict__ x0, const uint4* __restrict__ w,
                                                 long long w_vecs, int stream, int rounds, unsigned* __restrict__ sink) {
  __shared__ unsigned xs[kMaxN];
  __shared__ unsigned red[kThreads / 32];
  const int producers = gridDim.x, n = producers * kWords, cta = blockIdx.x;
  for (int i = threadIdx.x; i < n; i += kThreads) xs[i] = x0[i];
  __syncthreads();
  unsigned folded = 0u;
  for (int r = 1; r <= rounds; ++r) {
    const unsigned sum = block_sum(xs, n, red);
    folded += stream_w(w, w_vecs, stream, r, cta, gridDim.x);
    unsigned* out = x + (r & 1) * n;
    if (threadIdx.x < kWords) out[cta * kWords + threadIdx.x] = word_of(sum, r, cta * kWords + threadIdx.x);
    __syncthreads();
    if constexpr (kSpreadCount) {
      if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        if (lane == 0) {
          __threadfence();
          pl::events::add_one(counter + (cta % kSpread) * kLineWords);
        }
        if (lane < kSpread) {  // counter `lane` counts the CTAs c with c % 8 == lane
          const unsigned long long want = (unsigned long long)((producers - lane + kSpread - 1) / kSpread) * r;
          while (pl::events::load_acquire(counter + lane * kLineWords) < want) __nanosleep(64);
        }
        __syncwarp();
      }
    } else if (threadIdx.x == 0) {
      const unsigned long long want = (unsigned long long)producers * r;
      if constexpr (kRelease) {
        asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(counter) : "memory");
        while (ld_relaxed(counter) < want) __nanosleep(64);
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
      } else {
        __threadfence();
        pl::events::add_one(counter);
        while (pl::events::load_acquire(counter) < want) __nanosleep(64);
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) xs[i] = ld_cg(out + i);
    __syncthreads();
  }
  if (threadIdx.x == 0) sink[cta] = folded;
}

// --- a stream through the hand-off, and a warp that waits ----------------------------------------------------

constexpr int kComputeThreads = kThreads, kSlots = 2;
constexpr unsigned kStaggerNs = 128;
constexpr int kWaiterWarps = 4;

__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void compute_sync() {  // the 8 compute warps only (the extra warps never meet them)
  asm volatile("bar.sync 1, %0;" ::"n"(kComputeThreads) : "memory");
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ bool mbar_done(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
               " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done != 0u;
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

// The stream warp (lane 0): `slot` bytes of w into each of the two slots of `ring`, a bulk copy each, again as
// each lands, until *stop; the copies' bytes are never read (the stream's cost is the memory's).
__device__ void stream_through(const uint4* __restrict__ w, long long w_vecs, int slot, unsigned gap_ns,
                               unsigned char* ring, unsigned long long* landed, volatile unsigned* stop,
                               unsigned long long* __restrict__ fills_out) {
  static_assert(kSlots == 2, "stream_through: the two slots are taken in turn");
  if (slot == 0 || threadIdx.x % 32 != 0) return;
  const long long vecs = slot / 16, span = w_vecs - vecs;
  long long at = (long long)blockIdx.x * 7919 * vecs % span;
  // Slot i's copies so far (its landed mbarrier's phases): the next fill waits for the last one's phase.
  unsigned fills0 = 0u, fills1 = 0u;
  const auto fill = [&](int i, unsigned& fills) {
    if (fills) {
      while (!mbar_done(landed + i, (fills - 1u) & 1u)) {
      }
      if (gap_ns) __nanosleep(gap_ns);
    }
    if (*stop) return false;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(landed + i)), "r"(slot)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(ring + i * slot)), "l"(w + at), "r"(slot), "r"(smem_u32(landed + i)) : "memory");
    ++fills;
    at = (at + 4099 * vecs) % span;
    return true;
  };
  while (fill(0, fills0) && fill(1, fills1)) {
  }
  // every copy in flight lands before the block ends
  if (fills0)
    while (!mbar_done(landed, (fills0 - 1u) & 1u)) {
    }
  if (fills1)
    while (!mbar_done(landed + 1, (fills1 - 1u) & 1u)) {
    }
  fills_out[blockIdx.x] = (unsigned long long)fills0 + fills1;
}

// kWaiter: the count is waited for by the waiter warps (lane 0 of each), the compute warps on their mbarrier;
// else by compute thread 0, as the glue does. Block: 8 compute warps, the stream warp, kWaiterWarps waiter warps.
template <bool kWaiter>
__device__ void through_protocol(unsigned* __restrict__ x, unsigned long long* __restrict__ counter,
                                 const unsigned* __restrict__ x0, const uint4* __restrict__ w, long long w_vecs,
                                 int stream, int rounds, unsigned* __restrict__ sink, unsigned gap_ns,
                                 unsigned long long* __restrict__ fills) {
  __shared__ unsigned xs[kMaxN];
  __shared__ unsigned red[kThreads / 32];
  __shared__ unsigned long long landed[kSlots], met;
  __shared__ unsigned stop, met_round;
  extern __shared__ __align__(128) unsigned char ring[];  // kSlots * stream bytes
  const int producers = gridDim.x, n = producers * kWords, cta = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kSlots; ++i) mbar_init(landed + i, 1u);
    mbar_init(&met, 1u);
    stop = 0u;
    met_round = 0u;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();  // the only barrier of all the warps
  if (warp == kComputeThreads / 32) {  // the stream warp
    stream_through(w, w_vecs, stream, gap_ns, ring, landed, &stop, fills);
    return;
  }
  if (warp > kComputeThreads / 32) {  // a waiter warp
    if (!kWaiter || lane != 0) return;
    const unsigned i = (unsigned)(warp - kComputeThreads / 32 - 1);
    if (i) __nanosleep(i * kStaggerNs);
    for (int r = 1; r <= rounds; ++r) {
      const unsigned long long want = (unsigned long long)producers * r;
      while (*reinterpret_cast<volatile unsigned*>(&met_round) < (unsigned)r) {
        if (ld_relaxed(counter) >= want) {
          asm volatile("fence.acq_rel.gpu;" ::: "memory");  // acquire: the producers' words before the arrival
          if (atomicMax(&met_round, (unsigned)r) < (unsigned)r) mbar_arrive(&met);
          break;
        }
        __nanosleep(64);
      }
    }
    return;
  }
  for (int i = threadIdx.x; i < n; i += kComputeThreads) xs[i] = x0[i];
  compute_sync();
  for (int r = 1; r <= rounds; ++r) {
    unsigned s = 0u;  // the block's sum of xs, in a fixed order (block_sum over the compute warps)
    for (int i = threadIdx.x; i < n; i += kComputeThreads) s += xs[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp] = s;
    compute_sync();
    unsigned sum = 0u;
    for (int i = 0; i < kComputeThreads / 32; ++i) sum += red[i];
    unsigned* out = x + (r & 1) * n;
    if (threadIdx.x < kWords) out[cta * kWords + threadIdx.x] = word_of(sum, r, cta * kWords + threadIdx.x);
    compute_sync();  // the words written, red read
    if (threadIdx.x == 0) {
      __threadfence();
      pl::events::add_one(counter);
      if (!kWaiter)
        while (pl::events::load_acquire(counter) < (unsigned long long)producers * r) __nanosleep(64);
    }
    if (kWaiter) {
      while (!mbar_done(&met, (unsigned)(r - 1) & 1u)) {
      }
    }
    compute_sync();
    for (int i = threadIdx.x; i < n; i += kComputeThreads) xs[i] = ld_cg(out + i);
    compute_sync();
  }
  if (threadIdx.x == 0) {
    sink[cta] = xs[0];
    *reinterpret_cast<volatile unsigned*>(&stop) = 1u;
  }
}

}  // namespace

#define HANDOFF_PARAMS                                                                                         \
  unsigned *__restrict__ x, unsigned long long *__restrict__ counter, const unsigned *__restrict__ x0,         \
      const uint4 *__restrict__ w, long long w_vecs, int stream, int rounds, unsigned *__restrict__ sink

extern "C" __global__ void __launch_bounds__(kThreads, 2) counter_rounds(HANDOFF_PARAMS) {
  counter_protocol<false>(x, counter, x0, w, w_vecs, stream, rounds, sink);
}

extern "C" __global__ void __launch_bounds__(kThreads, 2) release_rounds(HANDOFF_PARAMS) {
  counter_protocol<true>(x, counter, x0, w, w_vecs, stream, rounds, sink);
}

// counter: kSpread * kLineWords words, zero at launch.
extern "C" __global__ void __launch_bounds__(kThreads, 2) spread_rounds(HANDOFF_PARAMS) {
  counter_protocol<false, true>(x, counter, x0, w, w_vecs, stream, rounds, sink);
}

// x: [2][n] tagged words (value low, round high), zero at launch.
extern "C" __global__ void __launch_bounds__(kThreads, 2)
tagged_rounds(unsigned long long* __restrict__ x, const unsigned* __restrict__ x0, const uint4* __restrict__ w,
              long long w_vecs, int stream, int rounds, unsigned* __restrict__ sink) {
  __shared__ unsigned xs[kMaxN];
  __shared__ unsigned red[kThreads / 32];
  const int producers = gridDim.x, n = producers * kWords, cta = blockIdx.x;
  for (int i = threadIdx.x; i < n; i += kThreads) xs[i] = x0[i];
  __syncthreads();
  unsigned folded = 0u;
  for (int r = 1; r <= rounds; ++r) {
    const unsigned sum = block_sum(xs, n, red);
    folded += stream_w(w, w_vecs, stream, r, cta, gridDim.x);
    unsigned long long* out = x + (r & 1) * n;
    if (threadIdx.x < kWords) {
      const int i = cta * kWords + threadIdx.x;
      st_relaxed(out + i, ((unsigned long long)(unsigned)r << 32) | word_of(sum, r, i));
    }
    for (int i = threadIdx.x; i < n; i += kThreads) {
      unsigned long long v = ld_relaxed(out + i);
      while ((unsigned)(v >> 32) != (unsigned)r) {
        __nanosleep(32);
        v = ld_relaxed(out + i);
      }
      xs[i] = (unsigned)v;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) sink[cta] = folded;
}

// Dynamic shared memory: 2 * stream bytes (the stream warp's slots). Block: 8 compute warps, the stream warp and
// kWaiterWarps waiter warps (416 threads).
// gap_ns: the stream warp's sleep after a slot lands; fills: one u64 a CTA, its stream's copies.
#define THROUGH_PARAMS HANDOFF_PARAMS, unsigned gap_ns, unsigned long long *__restrict__ fills

extern "C" __global__ void __launch_bounds__(kThreads + 32 * (1 + kWaiterWarps), 2) counter_bg_rounds(THROUGH_PARAMS) {
  through_protocol<false>(x, counter, x0, w, w_vecs, stream, rounds, sink, gap_ns, fills);
}

extern "C" __global__ void __launch_bounds__(kThreads + 32 * (1 + kWaiterWarps), 2) waiter_bg_rounds(THROUGH_PARAMS) {
  through_protocol<true>(x, counter, x0, w, w_vecs, stream, rounds, sink, gap_ns, fills);
}
