// moe_expert_hopper: moe_expert_split's tasks on Hopper tensor cores. Task (i, j) is share j of expert tile i
// (64 rows of one expert; ceil_div(I / 64, splits) blocks of 64 intermediate columns per share):
//   gate_up: for each 64 columns of the share, G = x Wg^T and U = x Wu^T in fp32 registers (one wgmma
//            m64n128k16 a k16 slice, gate and up rows as one B, K = H), then h = silu(G) * U into shared
//            memory as bf16;
//   down:    for each 128 output columns, the share's h Wd^T (K = the share's columns), stored to part[j]
//            in fp32 for the tile's routed rows; moe_expert_merge adds the shares up. A share of all I
//            columns (splits = 1) stores the tile's bf16 ys rows instead: no fp32 round trip, no merge.
// The CTA is one warpgroup. Operands are 128-byte-swizzled [rows][64] bf16 tiles in shared memory, the
// layout wgmma reads through a descriptor: cp.async stages them (x rows gathered by token, so no TMA),
// a ring of EXPERT_STAGES stages over the whole walk of a phase (no drain between column blocks; one step's
// products in flight while the next step's stage is awaited), and h
// is written in the same layout straight from the accumulators. Needs sm_90a (wgmma).
#include <cuda_bf16.h>

#include "moe_expert_hopper.pipelink.h"
#include "expert_share.cuh"

using namespace pl::moe_expert_hopper;
using bf16 = __nv_bfloat16;

namespace {

constexpr int BM = EXPERT_TILE_M;
constexpr int kTileBytes = 64 * 128;          // one swizzled [64 rows][64 bf16] tile
constexpr int kStageBytes = 3 * kTileBytes;    // x, gate, up; or two tiles of down rows
static_assert(BM == 64, "one wgmma m64 row block per tile");
static_assert(THREADS == 128, "one warpgroup");
static_assert(EXPERT_STAGES >= 3, "a ring of one stage in the products, one being read by the products before, one loading");
constexpr int kSpareStages = 2;  // stages a share of at most EXPERT_SHARE_MAX - 2 * 3 blocks adds in h's free part
static_assert(EXPERT_SHARE_MAX % 64 == 0 && EXPERT_SHARE_MAX <= EXPERT_MAX_INTER, "EXPERT_SHARE_MAX: whole blocks of 64");
static_assert(smem_stages_bytes >= EXPERT_STAGES * kStageBytes, "contract: smem.buffers.stages too small");
static_assert(smem_h_bytes >= EXPERT_SHARE_MAX / 64 * kTileBytes, "contract: smem.buffers.h too small");
static_assert(smem_stages_align >= 1024 && smem_h_align >= 1024, "the 128-byte swizzle needs 1024-byte aligned tiles");

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
// Shared memory written by the threads (cp.async, st.shared) is read by wgmma through the async proxy.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Byte offset of 16-byte chunk c of row r in a 128-byte-swizzled tile (the XOR the hardware undoes).
__device__ __forceinline__ unsigned swizzled(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// wgmma operand descriptor of a K-major, 128-byte-swizzled tile: 8-row groups 1024 bytes apart. Adding 2
// moves it 32 bytes along K (the next k16 slice).
__device__ __forceinline__ unsigned long long descriptor(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }

// [lo | hi] (+)= A[64 x 16] B[16 x 128], both K-major in shared memory: B is two 64-row tiles that lie
// back to back (gate then up, or two tiles of down rows), so one m64n128 product reads A once for both,
// where two m64n64 products read it twice (and issue twice).
// Thread t of the warpgroup holds, for n = 0..7, lo[4n + {0, 1}] at row 16 (t / 32) + (t % 32) / 4,
// columns 8n + 2 (t % 4) + {0, 1}, lo[4n + {2, 3}] 8 rows below, and hi likewise 64 columns right.
// (Starting a sum with accumulate = 0, not by zeroing the accumulators, keeps other instructions off
// them: else ptxas serializes the wgmma.)
__device__ __forceinline__ void wgmma_64x128(float (&lo)[32], float (&hi)[32], unsigned long long a,
                                             unsigned long long b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(lo[0]), "+f"(lo[1]), "+f"(lo[2]), "+f"(lo[3]), "+f"(lo[4]), "+f"(lo[5]), "+f"(lo[6]), "+f"(lo[7]),
        "+f"(lo[8]), "+f"(lo[9]), "+f"(lo[10]), "+f"(lo[11]), "+f"(lo[12]), "+f"(lo[13]), "+f"(lo[14]), "+f"(lo[15]),
        "+f"(lo[16]), "+f"(lo[17]), "+f"(lo[18]), "+f"(lo[19]), "+f"(lo[20]), "+f"(lo[21]), "+f"(lo[22]), "+f"(lo[23]),
        "+f"(lo[24]), "+f"(lo[25]), "+f"(lo[26]), "+f"(lo[27]), "+f"(lo[28]), "+f"(lo[29]), "+f"(lo[30]), "+f"(lo[31]),
        "+f"(hi[0]), "+f"(hi[1]), "+f"(hi[2]), "+f"(hi[3]), "+f"(hi[4]), "+f"(hi[5]), "+f"(hi[6]), "+f"(hi[7]),
        "+f"(hi[8]), "+f"(hi[9]), "+f"(hi[10]), "+f"(hi[11]), "+f"(hi[12]), "+f"(hi[13]), "+f"(hi[14]), "+f"(hi[15]),
        "+f"(hi[16]), "+f"(hi[17]), "+f"(hi[18]), "+f"(hi[19]), "+f"(hi[20]), "+f"(hi[21]), "+f"(hi[22]), "+f"(hi[23]),
        "+f"(hi[24]), "+f"(hi[25]), "+f"(hi[26]), "+f"(hi[27]), "+f"(hi[28]), "+f"(hi[29]), "+f"(hi[30]), "+f"(hi[31])
      : "l"(a), "l"(b), "r"(accumulate));
}

}  // namespace

// The task's work, with a ring of STAGES stages: EXPERT_STAGES in smem_stages, the rest in the part of h the
// share leaves free (a narrow share's h is a fraction of EXPERT_SHARE_MAX). At few tokens the task streams
// weights, and its bandwidth is the bytes in flight over the memory latency: two more stages are two more
// steps of loads in flight.
template <int STAGES>
__device__ __forceinline__ void expert_task(int i, int j, const ExpertShare& share, const bf16* __restrict__ x,
                                            const bf16* __restrict__ w_gate, const bf16* __restrict__ w_up,
                                            const bf16* __restrict__ w_down, const int* __restrict__ row_token,
                                            const int* __restrict__ tile_rows, float* __restrict__ part,
                                            bf16* __restrict__ ys, int T, int H, int I, int E, int TOPK) {
  const int e = share.expert, c0 = share.c0, c1 = share.c1;
  const int rows = __ldcg(tile_rows + i);  // written by moe_dispatch in this launch: through L2
  const long long row0 = (long long)i * BM;
  const bf16* const wg = w_gate + (long long)e * I * H;
  const bf16* const wu = w_up + (long long)e * I * H;
  const bf16* const wd = w_down + (long long)e * H * I;
  const unsigned ring = smem_addr(smem_stages<unsigned char>());
  unsigned char* const h = smem_h<unsigned char>();
  // Stage s: in the ring, or past the share's blocks of h (1024-byte aligned: whole 8 KB tiles)
  const unsigned spare = smem_addr(h) + (c1 - c0) / 64 * kTileBytes;
  auto stage_at = [&](int step) {
    const int s = step % STAGES;
    return s < EXPERT_STAGES ? ring + s * kStageBytes : spare + (s - EXPERT_STAGES) * kStageBytes;
  };
  int* const token = smem_tokens<int>();
  const int t = thread_rank(), warp = t / 32, lane = t % 32;
  const int frag_row = 16 * warp + lane / 4, frag_col = 2 * (lane % 4);  // of lo[0]; see wgmma_64x128

  for (int r = t; r < BM; r += THREADS) token[r] = r < rows ? __ldcg(row_token + row0 + r) : -1;
  __syncthreads();

  // What a thread stages never changes within a task but its K offset: 16-byte chunk `chunk` of rows
  // row_base + 16 q of each tile, at the same swizzled place in every stage. Precomputed here, the loads
  // of a k-step are one address add each; computed per load (row, chunk, token, a runtime division for
  // the block and K step) they made the k-step loop issue-bound (Nsight Compute: 4 cycles between a
  // warp's instructions, the one warp of each scheduler always ready, DRAM 11% busy).
  const int chunk = t % 8, row_base = t / 8;                    // rows row_base + 16 q, q = 0..3 (or 0..7)
  const unsigned dst0 = row_base * 128 + ((chunk ^ (row_base & 7)) << 4);  // + 2048 q: row + 16 q
  // Each row's element offset in x (T * H < 2^31), -1 for a padding row: 4 registers where pointers and
  // flags took 12, so the layer kernel keeps them instead of recomputing them from the tokens every step.
  int xoff[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int tok = token[row_base + 16 * q];
    xoff[q] = tok >= 0 ? tok * H + 8 * chunk : -1;
  }
  const long long wrow = (long long)row_base * H + 8 * chunk, wstep = 16ll * H;  // gate/up rows: + 16 q rows

  // gate_up: the share's column blocks, each over K = H in steps of 64; loads run STAGES - 2 steps
  // ahead of the products, across block boundaries. The products of a step run while the block waits for
  // the next one's stage (one wgmma group stays in flight): a stage is free again two steps after its
  // products were issued, once every warp has passed the barrier after its wait for them.
  const int ksteps = H / 64, blocks = (c1 - c0) / 64, up_steps = blocks * ksteps;
  int load_step = 0, load_k = 0, load_block = 0;  // the next step to load: its K step and column block
  auto load_gate_up = [&]() {
    const unsigned s = stage_at(load_step);
    const long long k0 = (long long)load_k * 64;
    const long long n0 = (long long)(c0 + load_block * 64) * H;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const unsigned d = s + dst0 + 2048 * q;
      cp_async16(d, x + (xoff[q] >= 0 ? xoff[q] + k0 : 0), xoff[q] >= 0);
      cp_async16(d + kTileBytes, wg + n0 + wrow + q * wstep + k0, true);
      cp_async16(d + 2 * kTileBytes, wu + n0 + wrow + q * wstep + k0, true);
    }
    ++load_step;
    if (++load_k == ksteps) load_k = 0, ++load_block;
  };
  float acc_g[32], acc_u[32];
  for (int s = 0; s < STAGES - 2; ++s) {
    if (load_step < up_steps) load_gate_up();
    cp_async_commit();
  }
  for (int g = 0, k = 0, block = 0; g < up_steps; ++g) {
    cp_async_wait<STAGES - 3>();
    fence_async_smem();
    __syncthreads();  // stage g landed for every thread; every warp's products of step g - 2 are done
    if (load_step < up_steps) load_gate_up();  // into step g - 2's stage
    cp_async_commit();
    const unsigned s = stage_at(g);
    const unsigned long long dx = descriptor(s), dgu = descriptor(s + kTileBytes);  // gate and up rows: one B
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_64x128(acc_g, acc_u, dx + 2 * kk, dgu + 2 * kk, kk > 0 || k > 0);
    wgmma_commit();
    if (++k < ksteps) {
      wgmma_wait<1>();  // step g - 1's products are done
      continue;
    }
    wgmma_wait<0>();  // the block's G and U are complete: h = silu(G) * U, swizzled for down
    unsigned char* hb = h + block * kTileBytes;
#pragma unroll
    for (int q = 0; q < 32; q += 2) {
      const int r = frag_row + 8 * ((q / 2) % 2), c = 8 * (q / 4) + frag_col;  // column within the block
      const float h0 = __fdividef(acc_g[q], 1.0f + __expf(-acc_g[q])) * acc_u[q];
      const float h1 = __fdividef(acc_g[q + 1], 1.0f + __expf(-acc_g[q + 1])) * acc_u[q + 1];
      *reinterpret_cast<__nv_bfloat162*>(hb + swizzled(r, c / 8) + 2 * (c % 8)) = __floats2bfloat162_rn(h0, h1);
    }
    k = 0, ++block;
  }
  cp_async_wait<0>();
  fence_async_smem();  // h, written by the threads, is read by wgmma next
  __syncthreads();

  // down: the 128-column passes over H, each over the share's blocks; rows row_base + 16 q (q = 0..7) of
  // the pass's two 64-row tiles.
  const int down_steps = (H / 128) * blocks;
  const long long drow = (long long)row_base * I + c0 + 8 * chunk, dstep = 16ll * I;
  int pass_load = 0;
  load_step = 0, load_block = 0;
  auto load_down = [&]() {
    const unsigned s = stage_at(load_step);
    const bf16* src = wd + (long long)pass_load * 128 * I + drow + load_block * 64;
#pragma unroll
    for (int q = 0; q < 8; ++q) cp_async16(s + dst0 + 2048 * q, src + q * dstep, true);
    ++load_step;
    if (++load_block == blocks) load_block = 0, ++pass_load;
  };
  const long long total = (long long)((T * TOPK + BM - 1) / BM + E) * BM;  // rows of one share's part
  float* const out = part + ((long long)j * total + row0) * H;
  bf16* const out_ys = ys + row0 * H;
  float (&acc_lo)[32] = acc_g, (&acc_hi)[32] = acc_u;  // output columns n0 .. +63 and n0 + 64 .. +127
  for (int s = 0; s < STAGES - 2; ++s) {
    if (load_step < down_steps) load_down();
    cp_async_commit();
  }
  const unsigned hbase = smem_addr(h);
  // The rows and columns a thread stores: element offsets within the tile's rows (64 * H < 2^31), and
  // whether the row is routed. (Computed per store, with 64-bit row products, they made the pass's stores
  // more than half of the down loop's instructions in the layer kernel.)
  const int at_lo = frag_row * H + frag_col, at_hi = at_lo + 8 * H;
  const bool live_lo = frag_row < rows, live_hi = frag_row + 8 < rows;
  for (int g = 0, b = 0, n0 = 0; g < down_steps; ++g) {
    cp_async_wait<STAGES - 3>();
    fence_async_smem();
    __syncthreads();  // as in gate_up
    if (load_step < down_steps) load_down();
    cp_async_commit();
    const unsigned s = stage_at(g);
    const unsigned long long da = descriptor(hbase + b * kTileBytes);
    const unsigned long long dw = descriptor(s);  // the pass's 128 down rows: two tiles back to back
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_64x128(acc_lo, acc_hi, da + 2 * kk, dw + 2 * kk, kk > 0 || b > 0);
    wgmma_commit();
    if (++b < blocks) {
      wgmma_wait<1>();
      continue;
    }
    wgmma_wait<0>();  // the pass's 128 columns are complete: the routed rows to ys, or to part[j]
    // A thread stores two rows (frag_row and 8 below) at fixed column offsets: one element offset a row.
    if (share.alone) {
#pragma unroll
      for (int q = 0; q < 32; q += 2) {
        const int hi_row = (q / 2) % 2, at = (hi_row ? at_hi : at_lo) + n0 + 8 * (q / 4);
        if (hi_row ? live_hi : live_lo) {
          *reinterpret_cast<__nv_bfloat162*>(out_ys + at) = __floats2bfloat162_rn(acc_lo[q], acc_lo[q + 1]);
          *reinterpret_cast<__nv_bfloat162*>(out_ys + at + 64) = __floats2bfloat162_rn(acc_hi[q], acc_hi[q + 1]);
        }
      }
    } else {
#pragma unroll
      for (int q = 0; q < 32; q += 2) {  // read by another CTA (the merge): past L1
        const int hi_row = (q / 2) % 2, at = (hi_row ? at_hi : at_lo) + n0 + 8 * (q / 4);
        if (hi_row ? live_hi : live_lo) {
          __stcg(reinterpret_cast<float2*>(out + at), make_float2(acc_lo[q], acc_lo[q + 1]));
          __stcg(reinterpret_cast<float2*>(out + at + 64), make_float2(acc_hi[q], acc_hi[q + 1]));
        }
      }
    }
    b = 0, n0 += 128;
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
}

extern "C" __device__ void moe_expert_hopper(pl::Tile tile, const bf16* __restrict__ x, const bf16* __restrict__ w_gate,
                                             const bf16* __restrict__ w_up, const bf16* __restrict__ w_down,
                                             const int* __restrict__ row_token, const int* __restrict__ tile_expert,
                                             const int* __restrict__ tile_rows, float* __restrict__ part,
                                             bf16* __restrict__ ys, int T, int H, int I, int E, int TOPK, int splits) {
  const int i = tile.coord[0], j = tile.coord[1];
  ExpertShare share;
  if (!expert_share(i, j, tile_expert, I, splits, EXPERT_SHARE_MAX, share)) return;
  if (H % 128 != 0) __trap();  // whole 128-column passes: the contract says H is a multiple of 128
  const int spare_bytes = smem_h_bytes - (share.c1 - share.c0) / 64 * kTileBytes;
  if (spare_bytes >= kSpareStages * kStageBytes)
    expert_task<EXPERT_STAGES + kSpareStages>(i, j, share, x, w_gate, w_up, w_down, row_token, tile_rows, part, ys, T, H, I, E, TOPK);
  else
    expert_task<EXPERT_STAGES>(i, j, share, x, w_gate, w_up, w_down, row_token, tile_rows, part, ys, T, H, I, E, TOPK);
}
