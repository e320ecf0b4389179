// Does compute-sanitizer's racecheck model shared memory that bulk copies (cp.async.bulk, the async proxy) fill
// and mbarriers hand over? The loader-ring step's racecheck reports its ring's copies against the slot reads
// (results/san_racecheck_lr.txt). Two hand-offs without a race, one launch each:
//   block: one buffer; the copy completes a full barrier by its byte count (expect_tx + complete_tx), every
//          thread waits on its phase, reads, and a block barrier orders the reads before the next copy;
//   ring:  the loader ring's protocol (pipelink/component.h, pl::ring): a loader warp and 8 reader warps, 2
//          slots with full and empty barriers; each reader warp arrives on the slot's empty barrier once it has
//          read it (arrive.release), the loader waits on that phase (try_wait.acquire) and fences the async
//          proxy before the next copy into the slot.
//   ring_all: `ring` with every reader thread arriving on the empty barrier (count 256), no lane relying on
//          __syncwarp to order its reads before its warp's one arrive.
// Hazards in `ring` and `ring_all` and none in `block` say the tool does not order the readers' release through an
// mbarrier before a bulk copy; hazards in `ring` alone, that it does not carry a warp's reads through __syncwarp
// to the one lane's release; hazards in none say look at the ring again.
//
//   nvcc -arch=sm_90a -o bulk_copy_racecheck bulk_copy_racecheck.cu && ./bulk_copy_racecheck block && ./bulk_copy_racecheck ring
//   compute-sanitizer --tool racecheck ./bulk_copy_racecheck block
//   compute-sanitizer --tool racecheck ./bulk_copy_racecheck ring
//   compute-sanitizer --tool racecheck ./bulk_copy_racecheck ring_all
#include <cstdio>
#include <cstdint>
#include <cstring>

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void wait_parity(unsigned bar, unsigned parity) {
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}"
               :: "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// 256 threads: one buffer, a block barrier between a round's reads and the next copy.
__global__ void block_handoff(const int4* __restrict__ g, int4* out, int rounds) {
  __shared__ alignas(128) int4 buf[256];
  __shared__ alignas(8) unsigned long long bar;
  const unsigned b = smem_u32(&bar), s = smem_u32(buf);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int4 acc = make_int4(0, 0, 0, 0);
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      bulk_copy(s, g + r * 256, 4096u, b);
    }
    wait_parity(b, (unsigned)(r & 1));
    const int4 v = buf[threadIdx.x];
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    __syncthreads();  // every read done before the next copy overwrites
  }
  out[threadIdx.x] = acc;
}

// 288 threads: warps 0-7 read, warp 8 loads; 2 slots of 4 KB, full and empty barriers as pl::ring's (ALL: every
// reader thread arrives, else one lane a warp after __syncwarp).
template <bool ALL>
__global__ void ring_handoff(const int4* __restrict__ g, int4* out, int rounds) {
  constexpr int SLOTS = 2, READERS = ALL ? 256 : 8;
  __shared__ alignas(128) int4 buf[SLOTS][256];
  __shared__ alignas(8) unsigned long long full[SLOTS], empty[SLOTS];
  if (threadIdx.x == 0) {
    for (int i = 0; i < SLOTS; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(&full[i])));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(&empty[i])), "r"(READERS));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 8) {  // the loader
    for (int r = 0; r < rounds; ++r) {
      const int i = r % SLOTS;
      const unsigned use = (unsigned)(r / SLOTS);
      if (use > 0) wait_parity(smem_u32(&empty[i]), (use - 1u) & 1u);  // the readers released its last use
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      if (lane == 0) bulk_copy(smem_u32(buf[i]), g + r * 256, 4096u, smem_u32(&full[i]));
      __syncwarp();
    }
    return;
  }
  int4 acc = make_int4(0, 0, 0, 0);
  for (int r = 0; r < rounds; ++r) {
    const int i = r % SLOTS;
    wait_parity(smem_u32(&full[i]), (unsigned)((r / SLOTS) & 1));
    const int4 v = buf[i][threadIdx.x];
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    if (!ALL) __syncwarp();
    if (ALL || lane == 0)
      asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" :: "r"(smem_u32(&empty[i])) : "memory");
  }
  out[threadIdx.x] = acc;
}

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess) {                                                     \
      std::printf("%s: %s\n", #call, cudaGetErrorString(e_));                   \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "block";
  const bool ring = std::strcmp(mode, "ring") == 0, ring_all = std::strcmp(mode, "ring_all") == 0;
  const int rounds = 8;
  int4 *g, *o;
  CHECK(cudaMalloc(&g, rounds * 4096));
  CHECK(cudaMalloc(&o, 4096));
  CHECK(cudaMemset(g, 1, rounds * 4096));
  CHECK(cudaMemset(o, 0xff, 4096));  // poisoned
  if (ring)
    ring_handoff<false><<<1, 288>>>(g, o, rounds);
  else if (ring_all)
    ring_handoff<true><<<1, 288>>>(g, o, rounds);
  else
    block_handoff<<<1, 256>>>(g, o, rounds);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int4 h[256];
  CHECK(cudaMemcpy(h, o, sizeof(h), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < 256; ++i)  // every int is rounds x 0x01010101
    wrong += h[i].x != rounds * 0x01010101 || h[i].y != rounds * 0x01010101 || h[i].z != rounds * 0x01010101 ||
             h[i].w != rounds * 0x01010101;
  std::printf("%s: %s\n", mode, wrong ? "sums WRONG" : "sums right");
  return wrong != 0;
}
