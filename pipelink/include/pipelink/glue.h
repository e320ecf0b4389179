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

}  // namespace glue
}  // namespace pl
