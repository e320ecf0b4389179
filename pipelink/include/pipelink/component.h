// pipelink component support: what every component may use, whatever its contract.
// Plain CUDA C++ with no standard-library includes, so NVRTC compiles it too.
#pragma once
#include <pipelink/profile_record.h>

// The component ABI: what the glue hands every entry (pl::Tile below) and what this header's helpers expect of
// the glue. Each object built against a contract's generated header defines pl_<component>__abi__<N> for the
// N of the component.h it was compiled with, and the linker warns (PL190) of an object built with another:
// the link still works (fields are only ever added at the end of pl::Tile), but the entry's parameter types
// differ from the glue's, so LTO does not inline it and the kernel is slower. Raise N with every such change.
#define PL_COMPONENT_ABI 1
#define PL_ABI_CAT_(a, b) a##b
#define PL_ABI_CAT(a, b) PL_ABI_CAT_(a, b)
#define PL_ABI_MARKER(prefix) extern "C" __device__ const unsigned PL_ABI_CAT(prefix, PL_COMPONENT_ABI) = 1u

namespace pl {

// The tile a per-tile entry is called for. `coord` follows the contract's tile_sequence grid;
// `stage` is the ring slot of the component's multi-stage ports for this tile.
struct Tile {
  int coord[3];
  int linear;     // position in the component's tile sequence
  int stage;      // ring slot (0 when the ports have one stage)
  int iteration;  // how many tiles (or tile pieces) this CTA has walked before this one; persistent: 0 unless
                  // the component has a prefetch entry (docs/contract.md)
  // A contract with a tile_sequence.reduction: this call covers the tile's reduction blocks
  // [k_begin, k_end), and the CTA walked k_first blocks before them (a stage ring's position).
  int k_begin = 0;
  int k_end = 0;
  int k_first = 0;
  // 1 when the CTA's previous task was of the same call (same layer) and no other task ran on the CTA
  // since, so the component's scratch buffers still hold what that task left there (an operand every task
  // of the call reads, staged once per CTA). Set by persistent schedules and by a sequential kernel of one
  // component; 0 everywhere else.
  int continues = 0;
  // A component with a load entry: the position of the task's first slot in the kernel's loader ring (the
  // same for the loader's call and the entry's; pl::ring below).
  int ring = 0;
  // A load entry whose contract says `loader.ahead`: 1 when the loader calls it for a task some tasks ahead of
  // the one it fills the ring for (the pipeline's `load_ahead`), to ask L2 for that task's data (pl::ring::ahead_l2)
  // while the ring is full: no slot, no barrier. 0 for every other call.
  int ahead = 0;
};

// The block's dynamic shared memory. Every component sees the same base; the linker hands out
// offsets inside it, so components never declare __shared__ arrays of their own.
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(1024) unsigned char pl_dynamic_smem[];
  return pl_dynamic_smem;
}

// Named barriers: `id` comes from the linker (a link-time constant), `threads` from the contract.
__device__ __forceinline__ void barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void barrier_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ unsigned warp_index() { return threadIdx.x >> 5; }
__device__ __forceinline__ unsigned lane_index() { return threadIdx.x & 31; }

// Task-profile marks. A persistent kernel linked with a task profile (`profile_tasks`) keeps the address of
// the running task's record in a word of shared memory; a component stamps point i of its task (0 ..
// kProfileMarks - 1: where its own phases end) with its header's `profile_mark(i)`, called by its first thread
// (thread_rank() 0: the thread that stores the record's address, so no barrier is needed between them).
// `at` is the link-time constant naming that word (its arena offset + 1), 0 where the link records no profile:
// there the call folds away. The record's words: its tag, the task's start, waits met, done, notifications
// out (pipelink/events.h), then one word per mark (0 where the task stamped none).
__device__ __forceinline__ void profile_mark(unsigned at, int i) {
  if (at != 0u && i >= 0 && i < kProfileMarks) {
    unsigned long long* const record = *reinterpret_cast<unsigned long long* volatile*>(dynamic_smem() + (at - 1u));
    if (record != nullptr) record[kProfileFirstMark + i] = profile::now();
  }
}

}  // namespace pl

namespace pl {

// A TMA descriptor (the driver's CUtensorMap: 128 opaque bytes, 64-byte aligned), encoded by the
// launcher from the user's tensor and passed as a __grid_constant__ kernel parameter; the glue
// hands components its address. Declared here so that code compiled by NVRTC needs no <cuda.h>.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

}  // namespace pl

// The loader ring of a kernel whose components have load entries (contract `entry.load`, `loader`): one warp
// after the compute warps calls each task's load entry, which fills the task's `loader.slots` slots in order,
// ahead of the task's waits; the entry drains them in the same order. Slot i of a task is ring position
// tile.ring + i. The glue defines these constants only in such a kernel.
extern "C" __device__ const unsigned pl_ring__base;       // arena offset of slot 0
extern "C" __device__ const unsigned pl_ring__slot_bytes;  // one slot (the largest any component asks for)
extern "C" __device__ const unsigned pl_ring__slots;       // slots in the ring
extern "C" __device__ const unsigned pl_ring__bars;        // full[slots], empty[slots], then the abort word
extern "C" __device__ const unsigned pl_ring__ahead;       // the pipeline's load_ahead: tasks asked of L2 ahead
extern "C" __device__ const unsigned pl_ring__in_flight;   // slots whose copies may be on their way at once
extern "C" __device__ const unsigned pl_ring__in_flight_behind;  // the same where a call refills the call before's slots
extern "C" __device__ const unsigned pl_ring__behind_until_release;  // 1: that cap ends once the call's first slot is released
extern "C" __device__ const unsigned pl_ring__evict_first; // 1: the copies' lines are the first L2 evicts

namespace pl {
namespace ring {

__device__ __forceinline__ unsigned position(const Tile& tile, int i) { return (unsigned)tile.ring + (unsigned)i; }
__device__ __forceinline__ unsigned index(unsigned pos) { return pos % pl_ring__slots; }
__device__ __forceinline__ unsigned phase(unsigned pos) { return (pos / pl_ring__slots) & 1u; }
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned full_bar(unsigned pos) {
  return smem_u32(dynamic_smem() + pl_ring__bars) + 8u * index(pos);
}
__device__ __forceinline__ unsigned empty_bar(unsigned pos) {
  return smem_u32(dynamic_smem() + pl_ring__bars) + 8u * (pl_ring__slots + index(pos));
}
__device__ __forceinline__ volatile unsigned long long* abort_word() {
  return reinterpret_cast<volatile unsigned long long*>(dynamic_smem() + pl_ring__bars + 16u * pl_ring__slots);
}
// With loader_in_flight_behind (its cap not loader_in_flight's): the ring position below which the loader's current
// call refills slots that held the call before's data (the glue's loader writes it at each call's first task).
__device__ __forceinline__ volatile unsigned* refills_end_word() {
  return reinterpret_cast<volatile unsigned*>(dynamic_smem() + pl_ring__bars + 16u * pl_ring__slots + 8u);
}
__device__ __forceinline__ void refills_until(int end) {
  *refills_end_word() = (unsigned)end;
  __syncwarp();
}

// Slot i of the task (pl_ring__slot_bytes bytes, 128-byte aligned).
__device__ __forceinline__ unsigned char* slot(const Tile& tile, int i) {
  return dynamic_smem() + pl_ring__base + index(position(tile, i)) * pl_ring__slot_bytes;
}

__device__ __forceinline__ bool try_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
               " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0u;
}

// Whether the phase of parity `parity` of mbarrier `bar` has completed, without waiting (test_wait never
// suspends the thread, where try_wait may).
__device__ __forceinline__ bool test_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
               " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done != 0u;
}

// The loader, with loader_in_flight_behind_until first_release: whether the compute warps have released ring
// position `pos` (the current call's first on the CTA, its hand-off over). Exact while the loader is below
// `pos` + slots: the release of `pos` is the only one that completes the phase it tests.
__device__ __forceinline__ bool released(unsigned pos) { return test_wait(empty_bar(pos), phase(pos)); }

// The glue's loader: whether ring position `pos`'s slot is free now (its previous use released).
__device__ __forceinline__ bool free_now(unsigned pos) { return test_wait(empty_bar(pos), phase(pos) ^ 1u); }

// The glue's loader warp (all its lanes), before each request ahead with the pipeline's load_ahead_gap_ns: wait
// `ns` nanoseconds, or until ring position `pos`'s slot is free, whichever is first; true when the slot is free
// (then the loader fills it instead of asking). The lanes follow lane 0, so the warp stays converged.
__device__ __forceinline__ bool pause_unless_free(unsigned pos, unsigned ns) {
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  t0 = __shfl_sync(0xffffffffu, t0, 0);
  for (;;) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    const int state = free_now(pos) ? 1 : (now - t0 >= ns ? 2 : 0);
    const int lane0 = __shfl_sync(0xffffffffu, state, 0);
    if (lane0) return lane0 == 1;
    __nanosleep(128);
  }
}

// The entry (every compute thread): wait until slot i of the task holds what the load entry copied there.
__device__ __forceinline__ void wait(const Tile& tile, int i) {
  const unsigned pos = position(tile, i);
  while (!try_wait(full_bar(pos), phase(pos))) {
  }
}

// The entry (every compute thread, once it has read slot i): the loader may refill it. Each thread arrives for
// its own reads (the empty barrier counts every compute thread): a release orders the arriving thread's reads
// before the loader's refill, and compute-sanitizer's racecheck follows it; one lane arriving for its warp after
// __syncwarp was reported as racing with the refill (case_studies/llama32_1b_decode/bulk_copy_racecheck.cu).
__device__ __forceinline__ void release(const Tile& tile, int i) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(empty_bar(position(tile, i))) : "memory");
}

// The load entry (the loader warp): wait until slot i of the task is free (its previous task released it), and,
// with the pipeline's loader_in_flight below the ring's slots, until the copy issued that many slots before has
// landed (so fewer bytes are on their way to the SM at once; loader_in_flight_behind's count where the slot held
// the call before's data, as that call's last tasks and its hand-off run); false when the compute warps left the
// kernel (a debug build's event timeout): return without loading.
__device__ __forceinline__ bool acquire(const Tile& tile, int i) {
  const unsigned pos = position(tile, i);
  while (!try_wait(empty_bar(pos), phase(pos) ^ 1u))  // a slot's first use waits for nothing
    if (*abort_word()) return false;
  // link-time constants: without loader_in_flight_behind the two caps are one and the test folds away; with
  // first_release the cap is asked again while waiting, so the wait ends once the call's first slot is released
  const unsigned refills_end = pl_ring__in_flight_behind != pl_ring__in_flight ? *refills_end_word() : 0u;
  while (true) {
    const bool paced = pos < refills_end &&
                       !(pl_ring__behind_until_release && released(refills_end - pl_ring__slots));
    const unsigned cap = paced ? pl_ring__in_flight_behind : pl_ring__in_flight;
    if (cap >= pl_ring__slots || pos < cap) break;
    const unsigned landed = pos - cap;  // its full phase completes once, when its bytes are in
    if (try_wait(full_bar(landed), phase(landed))) break;
    if (*abort_word()) return false;
  }
  // The compute warps read the slot with ordinary loads; the bulk copies that refill it are the async proxy's.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  return true;
}

// The load entry, one lane: slot i of the task completes when `bytes` have landed in it.
__device__ __forceinline__ void expect(const Tile& tile, int i, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(full_bar(position(tile, i))), "r"(bytes)
               : "memory");
}

// The load entry, any lane: a bulk copy of `bytes` (a multiple of 16, from a 16-byte aligned global address)
// to byte `offset` (16-byte aligned) of slot i, counted against the slot's expect().
// With the pipeline's loader_l2 "evict_first" the copy carries an L2 cache hint: its lines go first when L2 needs
// room, so data read once a launch (weights streamed at decode) does not push out what is read again.
__device__ __forceinline__ void copy(const Tile& tile, int i, unsigned offset, const void* src, unsigned bytes) {
  if (pl_ring__evict_first) {  // a link-time constant: LTO keeps one of the two
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, "
                 "[%3], %4;" ::"r"(smem_u32(slot(tile, i) + offset)), "l"(src), "r"(bytes),
                 "r"(full_bar(position(tile, i))), "l"(policy) : "memory");
  } else {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_u32(slot(tile, i) + offset)), "l"(src), "r"(bytes), "r"(full_bar(position(tile, i)))
                 : "memory");
  }
}

// The load entry called with tile.ahead (any lane): ask L2 for `bytes` (a multiple of 16, from a 16-byte
// aligned global address) that a later call of the entry copies into the ring; nothing waits for it.
__device__ __forceinline__ void ahead_l2(const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

// The glue, when the compute warps leave early (a debug build's event timeout): the loader stops too.
__device__ __forceinline__ void leave() {
  if (threadIdx.x == 0) *abort_word() = 1ull;
}

}  // namespace ring
}  // namespace pl
