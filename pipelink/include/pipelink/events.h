// pipelink event tensors: epoch-tagged counters in global memory, and the persistent task counter.
// A counter is one 64-bit word: the launch's epoch in the high half, the count in the low half. A
// launch counts from zero without anyone resetting the tensor: a stale epoch reads as count 0.
#pragma once

namespace pl {
namespace events {

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned count_in(unsigned long long word, unsigned epoch) {
  return (unsigned)(word >> 32) == epoch ? (unsigned)word : 0u;
}

// Add one to the counter for this epoch; returns the count before. The caller has made its
// writes visible first (__threadfence). Once a counter carries this launch's epoch it keeps it for
// the whole launch, so only the first notification of an element needs the compare-and-swap that
// replaces a stale epoch; the rest are one atomicAdd (no retries when many CTAs notify at once).
__device__ __forceinline__ unsigned add_one(unsigned long long* p, unsigned epoch) {
  unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(p), assumed;
  if ((unsigned)(seen >> 32) == epoch) return count_in(atomicAdd(p, 1ull), epoch);
  do {
    assumed = seen;
    const unsigned long long next = (unsigned)(assumed >> 32) == epoch
                                        ? assumed + 1ull
                                        : ((unsigned long long)epoch << 32) | 1ull;
    seen = atomicCAS(p, assumed, next);
  } while (seen != assumed);
  return count_in(assumed, epoch);
}

// Where a debug build reports a wait that never ended: the first words of the workspace, which
// the launcher reads back after the kernel has stopped.
struct Timeout {
  unsigned long long epoch;      // non-zero once written
  unsigned long long component;  // index into the manifest's components
  unsigned long long event;      // index into the manifest's events
  unsigned long long element;    // linear index of the element
  unsigned long long expected;
  unsigned long long observed;
  unsigned long long task;       // linear task index of the waiting task
  unsigned long long abort;      // set: every CTA stops waiting and leaves
};

// Wait until the counter reaches `count` in this epoch. With `bound` > 0 (a debug build) a wait
// that spins `bound` times records itself and makes every CTA leave instead of hanging.
__device__ __forceinline__ bool wait_for(const unsigned long long* p, unsigned count, unsigned epoch,
                                         unsigned long long bound, Timeout* report, unsigned component,
                                         unsigned event, unsigned long long element, unsigned long long task) {
  unsigned long long spins = 0;
  while (true) {
    const unsigned long long word = load_acquire(p);
    if (count_in(word, epoch) >= count) return true;
    if (bound) {
      if (*reinterpret_cast<volatile unsigned long long*>(&report->abort) == epoch) return false;
      if (++spins > bound) {
        if (atomicCAS(&report->epoch, 0ull, (unsigned long long)epoch) == 0ull) {
          report->component = component;
          report->event = event;
          report->element = element;
          report->expected = count;
          report->observed = count_in(word, epoch);
          report->task = task;
          __threadfence_system();
        }
        atomicExch(&report->abort, (unsigned long long)epoch);
        __threadfence_system();
        return false;
      }
    }
    __nanosleep(64);
  }
}

}  // namespace events
}  // namespace pl
