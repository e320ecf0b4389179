// Does compute-sanitizer's racecheck model shared memory that bulk copies (cp.async.bulk, the async proxy) fill
// and an mbarrier's transaction count hands to the readers? The loader-ring step's racecheck reports its ring's
// copies against the slot reads (results/san_racecheck_lr.txt); this kernel hands one buffer over the same way
// (expect_tx + complete_tx, every reader waits on the barrier's phase, a block barrier before the next copy, then
// fence.proxy.async), a protocol without a race. Hazards here too: the tool's; none: look at the ring again.
//
//   nvcc -arch=sm_90a -o bulk_copy_racecheck bulk_copy_racecheck.cu && ./bulk_copy_racecheck
//   compute-sanitizer --tool racecheck ./bulk_copy_racecheck
#include <cstdio>
#include <cstdint>
__global__ void k(const int4* __restrict__ g, int4* out, int rounds) {
  __shared__ alignas(128) int4 buf[256];
  __shared__ alignas(8) unsigned long long bar;
  unsigned b = (unsigned)__cvta_generic_to_shared(&bar), s = (unsigned)__cvta_generic_to_shared(buf);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  int4 acc = make_int4(0, 0, 0, 0);
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(4096u) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(s), "l"(g + r * 256), "r"(4096u), "r"(b) : "memory");
    }
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}"
                 :: "r"(b), "r"((unsigned)(r & 1)) : "memory");
    int4 v = buf[threadIdx.x];
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    __syncthreads();  // every read done before the next copy overwrites
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

int main() {
  const int rounds = 4;
  int4 *g, *o;
  CHECK(cudaMalloc(&g, rounds * 4096));
  CHECK(cudaMalloc(&o, 4096));
  CHECK(cudaMemset(g, 1, rounds * 4096));
  CHECK(cudaMemset(o, 0xff, 4096));  // poisoned
  k<<<1, 256>>>(g, o, rounds);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int4 h[256];
  CHECK(cudaMemcpy(h, o, sizeof(h), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < 256; ++i)  // every int is rounds x 0x01010101
    wrong += h[i].x != rounds * 0x01010101 || h[i].y != rounds * 0x01010101 || h[i].z != rounds * 0x01010101 ||
             h[i].w != rounds * 0x01010101;
  std::printf("%s\n", wrong ? "sums WRONG" : "sums right");
  return wrong != 0;
}
