// pipelink across ranks: what the glue of a distributed link uses, on NVSHMEM. Each rank runs one
// persistent kernel; the event workspace is symmetric (the same offsets on every rank), so a counter's
// local address names it on any rank. Included only by a distributed link's glue (it needs NVSHMEM's
// headers); the link adds NVSHMEM's device library.
#pragma once

#include <nvshmem.h>
#include <nvshmemx.h>

namespace pl {
namespace remote {

__device__ __forceinline__ int rank() { return nvshmem_my_pe(); }
__device__ __forceinline__ int world() { return nvshmem_n_pes(); }

// Add one to rank `pe`'s copy of the counter. The caller has made the task's writes visible to every
// rank first (__threadfence_system after the block's barrier: the component writes another rank's data
// through peer pointers, nvshmem_ptr).
__device__ __forceinline__ void add_one(unsigned long long* p, int pe) {
  nvshmemx_signal_op(reinterpret_cast<uint64_t*>(p), 1ull, NVSHMEM_SIGNAL_ADD, pe);
}

}  // namespace remote
}  // namespace pl
