// The task profile's record (a persistent kernel linked with `profile_tasks`): what the glue writes
// (pipelink/events.h, pl::profile) and where a component's own marks go (pipelink/component.h,
// pl::profile_mark). Plain CUDA C++, no includes.
#pragma once

namespace pl {

// Words of a record: its tag, the task's start, waits met, done, notifications out, then one per mark.
constexpr int kProfileFirstMark = 5;
constexpr int kProfileMarks = 6;

namespace profile {

// A record's stamps: the global timer (ns).
__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace profile
}  // namespace pl
