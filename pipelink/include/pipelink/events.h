// pipelink event tensors: counters in global memory, and the persistent task counter.
// A counter is one 64-bit word that starts the launch at zero: launches alternate between two
// regions of the workspace, and each launch zeroes the region the previous one used for the
// launch after it (see pipelink/workspace.py), so nothing resets them in the stream.
#pragma once

#include <pipelink/profile_record.h>  // the task profile's record
#include <pipelink/workspace.h>  // the workspace header: the timeout report, the task counter

// How long a waiting thread sleeps between two reads of a counter (the pipeline's wait_backoff_ns; the glue
// defines it before this header when the pipeline sets another value; 0: read again at once).
#ifndef PL_WAIT_BACKOFF_NS
#define PL_WAIT_BACKOFF_NS 64u
#endif

namespace pl {
namespace events {

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The same at system scope: a counter other ranks (other GPUs) add to (pipelink/remote.h).
__device__ __forceinline__ unsigned long long load_acquire_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Add one to the counter; returns the count before. The caller has made its writes visible first
// (__threadfence after the block's barrier).
__device__ __forceinline__ unsigned long long add_one(unsigned long long* p) { return atomicAdd(p, 1ull); }

// Wait until the counter reaches `count`. With `bound` > 0 (a debug build) a wait that spins
// `bound` times records itself, under this launch's epoch, and makes every CTA leave instead of
// hanging. kAcrossRanks: other ranks add to the counter, so it is read at system scope.
template <bool kAcrossRanks = false>
__device__ __forceinline__ bool wait_for(const unsigned long long* p, unsigned count, unsigned epoch,
                                         unsigned long long bound, Timeout* report, unsigned component,
                                         unsigned event, unsigned long long element, unsigned long long task) {
  unsigned long long spins = 0;
  while (true) {
    const unsigned long long word = kAcrossRanks ? load_acquire_sys(p) : load_acquire(p);
    if (word >= count) return true;
    if (bound) {
      if (*reinterpret_cast<volatile unsigned long long*>(&report->abort) == epoch) return false;
      if (++spins > bound) {
        if (atomicCAS(&report->epoch, 0ull, (unsigned long long)epoch) == 0ull) {
          report->component = component;
          report->event = event;
          report->element = element;
          report->expected = count;
          report->observed = word;
          report->task = task;
          __threadfence_system();
        }
        atomicExch(&report->abort, (unsigned long long)epoch);
        __threadfence_system();
        return false;
      }
    }
    if (bound != 0ull || PL_WAIT_BACKOFF_NS != 0u) __nanosleep(bound != 0ull ? 64u : PL_WAIT_BACKOFF_NS);  // a debug
  }                                                                  // bound counts reads 64 ns apart
}

}  // namespace events

// The task profile (a pipeline's `profile_tasks`): thread 0 of a CTA writes one record per task into a
// ring in global memory that the launcher reads back (runtime/profile.py decodes it).
namespace profile {

__device__ __forceinline__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Record: [launch (16 bits) | component (8; its top bit set in the loader warp's records, see linker/glue.py
// _loader_record) | SM (8) | task (32)], then the stamps (ns): the task starts,
// its waits are met, its entry and the block's barrier are done, its notifications are out; then the
// component's own marks (pl::profile_mark in component.h), 0 where it stamped none. `begin` takes the task's
// slot, writes the first two words and clears the marks; `stamp` the others as the task gets there (so only
// the slot's address stays live across the component's code).
constexpr int kWords = kProfileFirstMark + kProfileMarks;

// A recording thread takes the ring's slots up to kClaim at a time: one atomic round trip to L2 for a chunk of
// records, not one before every task (a task's start waited for it). `claim` is the thread's two words of shared
// memory (the glue's: zero when the launch starts): the chunk's next slot and its end. Slots of a chunk the launch
// leaves unused keep what they held: an older launch's record, or zeros (runtime/profile.py skips both). A chunk
// is at most capacity / (32 * CTAs) slots, so what a launch's recording threads (at most 16 a CTA) leave unused
// stays under half the ring; a ring that small claims one slot at a time, as before.
constexpr unsigned long long kClaim = 16;

__device__ __forceinline__ unsigned long long* begin(unsigned long long* ring, unsigned long long* next,
                                                     unsigned long long capacity, unsigned long long launch,
                                                     unsigned component, long long task,
                                                     unsigned long long* claim) {
  const unsigned long long start = now();
  if (claim[0] == claim[1]) {
    const unsigned long long per_cta = capacity / (32ull * gridDim.x);
    const unsigned long long chunk = per_cta < 1ull ? 1ull : (per_cta > kClaim ? kClaim : per_cta);
    claim[0] = atomicAdd(next, chunk);
    claim[1] = claim[0] + chunk;
  }
  const unsigned long long slot = claim[0]++ % capacity;
  unsigned long long* r = ring + slot * kWords;
  r[0] = ((launch & 0xFFFFull) << 48) | ((unsigned long long)(component & 0xFFu) << 40) |
         ((unsigned long long)(sm_id() & 0xFFu) << 32) | (unsigned long long)(unsigned)task;
  r[1] = start;
#pragma unroll
  for (int i = 0; i < kProfileMarks; ++i) r[kProfileFirstMark + i] = 0ull;
  return r;
}

__device__ __forceinline__ void stamp(unsigned long long* record, int word) { record[word] = now(); }

}  // namespace profile
}  // namespace pl
