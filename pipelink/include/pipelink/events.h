// pipelink event tensors: counters in global memory, and the persistent task counter.
// A counter is one 64-bit word that starts the launch at zero: launches alternate between two
// regions of the workspace, and each launch zeroes the region the previous one used for the
// launch after it (see pipelink/workspace.py), so nothing resets them in the stream.
#pragma once

#include <pipelink/workspace.h>  // the workspace header: the timeout report, the task counter

namespace pl {
namespace events {

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Add one to the counter; returns the count before. The caller has made its writes visible first
// (__threadfence after the block's barrier).
__device__ __forceinline__ unsigned long long add_one(unsigned long long* p) { return atomicAdd(p, 1ull); }

// Wait until the counter reaches `count`. With `bound` > 0 (a debug build) a wait that spins
// `bound` times records itself, under this launch's epoch, and makes every CTA leave instead of
// hanging.
__device__ __forceinline__ bool wait_for(const unsigned long long* p, unsigned count, unsigned epoch,
                                         unsigned long long bound, Timeout* report, unsigned component,
                                         unsigned event, unsigned long long element, unsigned long long task) {
  unsigned long long spins = 0;
  while (true) {
    const unsigned long long word = load_acquire(p);
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
    __nanosleep(64);
  }
}

}  // namespace events
}  // namespace pl
