// pipelink in-entry waits: what a component whose contract has an in-entry wait uses (its generated header includes
// this one). Plain CUDA C++ with no standard-library includes, so NVRTC compiles it too.
#pragma once
#include <pipelink/component.h>
#include <pipelink/events.h>  // counters and their waits

// In-entry waits (a contract's `events.waits[].in_entry`): the glue does not wait for these before the entry; the
// entry waits for each element itself, right before it reads what that element guards, so a task can start on
// the part of its input that is ready while the rest is still being written (a down projection reading the
// columns of h that gate/up has finished). Before each task the glue's first thread writes one Context per such
// wait into shared memory at the component's `waits_at` (its header's constant, the arena offset + 1; 0 where
// the component has none), and the block meets before the entry. Element i (0 .. n - 1, in the order of the
// map's one axis) is the counter `first + i * stride`, met when it reaches `count`.
namespace pl {
namespace in_entry {

struct Context {
  unsigned long long* first;   // element 0's counter
  long long stride;            // counters between two consecutive elements
  long long n;                 // elements; 0: not waited for in this link (met)
  long long at;                // element 0's index in the event tensor (a debug report)
  events::Timeout* report;     // a debug build's report, else null
  unsigned long long bound;    // a debug build's spins before it reports
  unsigned long long task;     // the task (a debug report)
  unsigned count;              // what each element must reach
  unsigned epoch;              // the launch (a debug report)
  unsigned who;                // component << 16 | event (a debug report)
  unsigned backoff_ns;         // sleep between two reads (the pipeline's wait_backoff_ns)
};
static_assert(sizeof(Context) == 72, "linker/event_glue.py's IN_ENTRY_CONTEXT_BYTES");

__device__ __forceinline__ const Context& context(unsigned at, int w) {
  return *reinterpret_cast<const Context*>(dynamic_smem() + (at - 1u) + (unsigned)w * (unsigned)sizeof(Context));
}

// Elements the running task's wait `w` names (0 where the link waits for none of them: the producers ran
// before the launch).
__device__ __forceinline__ long long elements(unsigned at, int w) { return at == 0u ? 0ll : context(at, w).n; }

// Whether element i has reached its count now (an acquire: what it guards may be read after it returns true).
__device__ __forceinline__ bool met(unsigned at, int w, long long i) {
  if (at == 0u) return true;
  const Context& c = context(at, w);
  return c.n == 0ll || events::load_acquire(c.first + i * c.stride) >= c.count;
}

// The first of elements i0, i0 + step, ... (below i1) that has not reached its count now, or i1 when they all have;
// elements past the first kMax are taken as not reached (i0 + kMax * step). One relaxed read each, all in flight
// at once, then an acquire fence: what the elements before the returned one guard may be read after it returns.
// A block finds how far its input is ready in one round trip: thread r asks for i0 + r, step the block's threads,
// and the block takes the least answer.
template <int kMax = 4>
__device__ __forceinline__ long long first_unmet(unsigned at, int w, long long i0, long long i1, long long step) {
  if (at == 0u) return i1;
  const Context& c = context(at, w);
  if (c.n == 0ll) return i1;
  unsigned seen[kMax];  // a counter's low word: counts are 32-bit (Context::count)
#pragma unroll
  for (int k = 0; k < kMax; ++k) {
    const long long i = i0 + k * step;
    seen[k] = ~0u;
    if (i < i1) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen[k]) : "l"(c.first + i * c.stride) : "memory");
  }
  long long first = i0 + kMax * step < i1 ? i0 + kMax * step : i1;
#pragma unroll
  for (int k = kMax - 1; k >= 0; --k)
    if (i0 + k * step < i1 && seen[k] < c.count) first = i0 + k * step;
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  return first;
}

// Wait until element i has reached its count. False only in a debug build whose wait ran past its bound (the
// kernel is being stopped: the entry returns without reading what the element guards).
__device__ __forceinline__ bool wait(unsigned at, int w, long long i) {
  if (at == 0u) return true;
  const Context& c = context(at, w);
  if (c.n == 0ll) return true;
  if (c.report != nullptr)
    return events::wait_for(c.first + i * c.stride, c.count, c.epoch, c.bound, c.report, c.who >> 16, c.who & 0xFFFFu,
                            (unsigned long long)(c.at + i * c.stride), c.task);
  const unsigned long long* const p = c.first + i * c.stride;
  const unsigned count = c.count, backoff = c.backoff_ns;
  while (events::load_acquire(p) < count)
    if (backoff != 0u) __nanosleep(backoff);
  return true;
}

}  // namespace in_entry
}  // namespace pl
