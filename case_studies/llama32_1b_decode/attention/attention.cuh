// The body the decode-attention components share: for one batch row b and one KV head h, the 4 query heads
// of the group (q heads 4h .. 4h+3) attend over the cache positions [l0, l1) of k and v [B, 8, Lmax, 64]
// (a cache of capacity Lmax; positions at or past Lmax are never read).
//
// Two walks over the positions, the components' ATTN_WALK choosing: on the tensor cores (WALK_MMA, attend_mma
// below: warps, mma.sync, P rounded to bf16) or on the CUDA cores' lanes (WALK_LANES, described here; the
// arithmetic of every score and sum in fp32). Both end in the same merge of states through shared memory.
//
// The lane walk: the block's 256 threads form 32 groups of 8 lanes; a group walks positions grp, grp + 32, ... of the
// range, each lane holding 8 of the 64 dimensions: one 16-byte copy of the K row and one of the V row per
// position. A walk's round is UNROLL positions a group (64 positions of the block). A long walk (RING_ROUNDS
// rounds or more) keeps the copies of STAGES - 1 rounds in flight while a round is computed, through a ring in
// shared memory (cp.async through L2); each lane reads back only its own copies, so the ring needs no barrier,
// only the lane's cp.async groups. Registers alone hold one round in flight, so a long walk in registers is a
// chain of round trips; a short one (a split of a few rounds) loads its rounds into registers. Either way the
// cache is read past L1 (once), and coherently, as q is (ld.global.cg): in one kernel with qkv_rope, q and the
// cache's newest position are written by other CTAs of the same launch. The 4 partial dot
// products of a position meet in a shuffle reduction inside the group; every group keeps its own online
// softmax state (running max m, sum l, unnormalized acc) per query head, in fp32, with the scores in the
// log2 domain (q is scaled by log2(e) / sqrt(64) once, exp2f thereafter). The 32 groups' states then meet
// in shared memory: thread t = 64 * head + d returns the block's (m, l, acc[d]) of query head `head`.
#pragma once
#include <cuda_bf16.h>
#include <math_constants.h>

namespace attn_body {

using bf16 = __nv_bfloat16;

constexpr int KV_HEADS = 8;
constexpr int Q_HEADS = 32;
constexpr int GROUP = Q_HEADS / KV_HEADS;  // 4 query heads per KV head
constexpr int HEAD_DIM = 64;
constexpr int THREADS = GROUP * HEAD_DIM;  // 256: one thread per (query head, dimension) after the merge
constexpr int LANES = HEAD_DIM / 8;        // 8 lanes per position, 8 dimensions (16 bytes) each
constexpr int GROUPS = THREADS / LANES;    // 32 position groups
// one f32 record per group in shared memory: acc [GROUP][HEAD_DIM], then m [GROUP], then l [GROUP]
constexpr int RECORD = GROUP * HEAD_DIM + 2 * GROUP;
constexpr int SMEM_BYTES = GROUPS * RECORD * 4;
// The ring of STAGES rounds of UNROLL positions a group: a K and a V vector of every thread per position.
// It shares its bytes with the groups' records (written after the walk): the smem a task needs is the larger.
constexpr int ring_bytes(int stages, int unroll) { return stages * unroll * 2 * THREADS * 16; }
constexpr int smem_bytes(int stages, int unroll) {
  return ring_bytes(stages, unroll) > SMEM_BYTES ? ring_bytes(stages, unroll) : SMEM_BYTES;
}
// log2(e) / sqrt(HEAD_DIM): the softmax scale folded into q, scores in the log2 domain
constexpr float Q_SCALE = 1.4426950408889634f * 0.125f;
// The walks (the components' ATTN_WALK): groups of 8 lanes on the CUDA cores, or warps on the tensor cores.
constexpr int WALK_LANES = 1, WALK_MMA = 2;

// 16 bytes of the cache into registers, past L1 (the walk of a few rounds).
__device__ __forceinline__ uint4 load_cache(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes of the cache into shared memory through L2 (`bytes` 0: zeros, nothing read).
__device__ __forceinline__ void copy_cache(uint4* dst, const bf16* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory"); }

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// Flash-decoding's cut of the context (attn_split and attn_merge both read it; their contracts declare the
// same expression for the grid and the workspace): S balanced splits, as many as fill the GPU about once
// with B * 8 * S tasks (`tasks`), never so many that a split has fewer than `min_len` positions. Split s
// starts at split_begin(s): the first L % S splits have L / S + 1 positions, the others L / S (never
// empty, since S <= L; 32-bit arithmetic without a division by a product that could overflow).
__device__ __forceinline__ int split_count(int B, int L, int tasks, int min_len) {
  const int by_len = (L + min_len - 1) / min_len;
  const int by_tasks = (tasks + B * KV_HEADS - 1) / (B * KV_HEADS);
  return min(by_len, by_tasks);
}
__device__ __forceinline__ int split_begin(int s, int S, int L) { return s * (L / S) + min(s, L % S); }

struct State {
  float m;    // running max of the scores, log2 domain (-inf: no position seen)
  float l;    // sum of exp2(score - m)
  float acc;  // sum of exp2(score - m) * v[d]
};

// The block's state from RECORDS records in shared memory (red, each acc [GROUP][HEAD_DIM], m [GROUP],
// l [GROUP], written before a barrier): thread t = 64 * head + d merges query head `head` in record order.
template <int RECORDS, class Sync>
__device__ __forceinline__ State merge_states(const float* __restrict__ red, Sync sync) {
  const int t = threadIdx.x % THREADS;
  const int head = t / HEAD_DIM, d = t % HEAD_DIM;
  float mx = -CUDART_INF_F;
#pragma unroll 8
  for (int i = 0; i < RECORDS; ++i) mx = fmaxf(mx, red[i * RECORD + GROUP * HEAD_DIM + head]);
  State st{mx, 0.0f, 0.0f};
  if (mx != -CUDART_INF_F) {
#pragma unroll 8
    for (int i = 0; i < RECORDS; ++i) {
      const float mi = red[i * RECORD + GROUP * HEAD_DIM + head];
      if (mi == -CUDART_INF_F) continue;  // a record that saw no position
      const float w = exp2f(mi - mx);
      st.l = fmaf(red[i * RECORD + GROUP * HEAD_DIM + GROUP + head], w, st.l);
      st.acc = fmaf(red[i * RECORD + head * HEAD_DIM + d], w, st.acc);
    }
  }
  sync();  // every thread has read the records before the next task on this CTA writes them
  return st;
}

// --- The walk on the tensor cores (WALK_MMA) -------------------------------------------------------------------
// Each warp takes UNROLL / 2 tiles of 8 positions a round (the round is the same 64 positions of the block): the
// 4 query heads are rows 0-3 of an m16 tile (rows 4-15 zero), so S = q K^T is mma.sync m16n8k16 over the 64
// dimensions (4 k steps) and acc += P V is m16n8k8 per 8 dimensions, P the tile's exp2 scores rounded to bf16
// (as flash attention's kernels do; the scores, the softmax state and acc stay fp32). K and V come through a
// ring of cp.async copies per warp (swizzled 128-byte rows, read by ldmatrix: V transposed), so a warp waits on
// its own copies only. Against the lane walk: about a tenth of the instructions a position; the results differ
// by P's rounding, not bit for bit.
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_1688(float (&d)[4], unsigned a0, unsigned a1, unsigned b0) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(b0));
}
// Four 8x8 b16 matrices from shared memory: lane l gives row l % 8 of matrix l / 8.
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// What a walk's prefetch started before the task's waits (attend_ahead): its first `rounds` rounds of K/V copies,
// every position of them but `skip` (the position this launch's cache append writes: copied after the waits).
struct Ahead {
  int rounds = 0;
  int skip = -1;
  // The two words a prefetch entry carries to its entry (the contract's entry.carry: 2).
  __device__ __forceinline__ void store(unsigned* carry) const {
    carry[0] = (unsigned)rounds;
    carry[1] = (unsigned)skip;
  }
  __device__ __forceinline__ static Ahead load(const unsigned* carry) { return Ahead{(int)carry[0], (int)carry[1]}; }
};

// The tensor-core walk's ring: round r's tiles of warp `warp` into slot r % STAGES; row i (a position) of a tile
// holds its 16-byte chunk c at c ^ i, so ldmatrix's 8 rows fall in 8 bank groups. Lane l copies chunks l and
// l + 32 of each tile: f(dst, p, c) for each, dst the K chunk's shared address (V's at dst + kTileBytes), p the
// position, c the chunk.
template <int UNROLL, int STAGES>
struct MmaRing {
  static constexpr int WARPS = THREADS / 32;
  static constexpr int TILES = UNROLL / 2;             // 8-position tiles of a warp a round
  static constexpr int kTileBytes = 8 * HEAD_DIM * 2;  // one tile of K (or V): 8 rows of 128 bytes
  static constexpr int WARP_SLOT = 2 * TILES * kTileBytes;
  static constexpr int ROUND = GROUPS * UNROLL;  // positions of the block a round
  static_assert(WARPS * WARP_SLOT == UNROLL * 2 * THREADS * 16, "attention: the mma ring is the lane ring's bytes");
  template <class F>
  static __device__ __forceinline__ void visit(unsigned ring, int r, int l0, int warp, int lane, F f) {
    const unsigned slot = ring + (r % STAGES) * WARPS * WARP_SLOT;
#pragma unroll
    for (int n = 0; n < TILES; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int idx = lane + 32 * half, row = idx / 8, c = idx % 8;
        f(slot + (2 * n) * kTileBytes + row * 128 + ((c ^ row) * 16), l0 + r * ROUND + (warp * TILES + n) * 8 + row, c);
      }
  }
  // Round r's copies (positions at or past l1 zero-filled, `skip` left out), one commit group.
  static __device__ __forceinline__ void issue(unsigned ring, int r, int rounds, int l0, int l1, int skip, int warp,
                                               int lane, const bf16* kp, const bf16* vp) {
    if (r < rounds)
      visit(ring, r, l0, warp, lane, [&](unsigned dst, int p, int c) {
        const bool in = p < l1;
        const long long at = in ? (long long)p * HEAD_DIM + c * 8 : 0;
        if (p != skip) {
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(kp + at), "r"(in ? 16 : 0)
                       : "memory");
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + kTileBytes), "l"(vp + at),
                       "r"(in ? 16 : 0) : "memory");
        }
      });
    commit_copies();
  }
};

// The tensor-core walk's first STAGES - 1 rounds of copies for positions [l0, l1), started before the task waits
// for its q (a component's prefetch entry): every position but `skip`, which the launch writes. Returns what the
// walk then passes to attend_mma.
template <int UNROLL, int STAGES>
__device__ __forceinline__ Ahead attend_ahead(const bf16* __restrict__ k, const bf16* __restrict__ v, int b, int h,
                                              int l0, int l1, int Lmax, int skip, float* __restrict__ red) {
  using Ring = MmaRing<UNROLL, STAGES>;
  l1 = min(l1, Lmax);
  const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32;
  const long long head_base = ((long long)b * KV_HEADS + h) * (long long)Lmax * HEAD_DIM;
  const int rounds = (l1 - l0 + Ring::ROUND - 1) / Ring::ROUND;
  const unsigned ring = (unsigned)__cvta_generic_to_shared(red) + warp * Ring::WARP_SLOT;
#pragma unroll
  for (int r = 0; r < STAGES - 1; ++r) Ring::issue(ring, r, rounds, l0, l1, skip, warp, lane, k + head_base, v + head_base);
  return Ahead{STAGES - 1, skip};
}

template <int UNROLL, int STAGES, class Sync>
__device__ __forceinline__ State attend_mma(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                            const bf16* __restrict__ v, int b, int h, int l0, int l1, int Lmax,
                                            float* __restrict__ red, Sync sync, Ahead ahead = {}) {
  static_assert(STAGES >= 2, "attention: a ring of at least two rounds (one computed, one in flight)");
  static_assert(UNROLL % 2 == 0, "attention: the tensor-core walk takes whole tiles of 8 positions a warp");
  using Ring = MmaRing<UNROLL, STAGES>;
  constexpr int WARPS = Ring::WARPS, TILES = Ring::TILES, TILE_BYTES = Ring::kTileBytes, WARP_SLOT = Ring::WARP_SLOT;
  l1 = min(l1, Lmax);
  const int t = threadIdx.x % THREADS, warp = t / 32, lane = t % 32;
  const int g = lane / 4, qd = lane % 4;
  const long long head_base = ((long long)b * KV_HEADS + h) * (long long)Lmax * HEAD_DIM;
  const bf16* kp = k + head_base;
  const bf16* vp = v + head_base;
  constexpr int ROUND = Ring::ROUND;
  const int rounds = (l1 - l0 + ROUND - 1) / ROUND;
  const unsigned ring = (unsigned)__cvta_generic_to_shared(red) + warp * WARP_SLOT;
  const auto issue = [&](int r) { Ring::issue(ring, r, rounds, l0, l1, -1, warp, lane, kp, vp); };
  if (ahead.rounds == 0) {
#pragma unroll
    for (int r = 0; r < STAGES - 1; ++r) issue(r);
  } else if (ahead.skip >= l0 && ahead.skip < l1) {
    // the position the prefetch left out, written in this launch before the task's waits were met: copied now
    // (this lane's own stores, read after the walk's __syncwarp)
    for (int r = 0; r < ahead.rounds && r < rounds; ++r)
      Ring::visit(ring, r, l0, warp, lane, [&](unsigned dst, int p, int c) {
        if (p == ahead.skip) {
          const uint4 kv = __ldcg(reinterpret_cast<const uint4*>(kp + (long long)p * HEAD_DIM + c * 8));
          const uint4 vv = __ldcg(reinterpret_cast<const uint4*>(vp + (long long)p * HEAD_DIM + c * 8));
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(kv.x), "r"(kv.y), "r"(kv.z),
                       "r"(kv.w) : "memory");
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + TILE_BYTES), "r"(vv.x), "r"(vv.y),
                       "r"(vv.z), "r"(vv.w) : "memory");
        }
      });
  }

  // q as the A operand: row g (query head 4h + g, g < 4) at k step kk: dimensions 16 kk + 2 qd (+1) and + 8.
  unsigned qa[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    qa[kk][1] = qa[kk][3] = 0u;  // rows 8-15
    if (g < GROUP) {
      const unsigned* qrow = reinterpret_cast<const unsigned*>(q + ((long long)b * Q_HEADS + h * GROUP + g) * HEAD_DIM);
      qa[kk][0] = __ldcg(qrow + (16 * kk + 2 * qd) / 2);
      qa[kk][2] = __ldcg(qrow + (16 * kk + 8 + 2 * qd) / 2);
    } else {
      qa[kk][0] = qa[kk][2] = 0u;
    }
  }

  // Row g's state (lanes of g < 4 hold a query head; the others compute zeros): m, this lane's part of l, and
  // acc for dimensions 8 j + 2 qd (+1) (c[2], c[3] of each tile are rows 8-15, zeros).
  float m = -CUDART_INF_F, l = 0.0f, acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // ldmatrix rows: lane l gives row l % 8 of matrix l / 8 (chunk c of the tile's rows, swizzled)
  const int lrow = lane % 8, lmat = lane / 8;

  for (int r = 0; r < rounds; ++r) {
    wait_copies<STAGES - 2>();  // this lane's copies of round r have landed
    __syncwarp();               // and every lane's: the warp reads them all; all are done with round r - 1's slot
    issue(r + STAGES - 1);
    const unsigned slot = ring + (r % STAGES) * WARPS * WARP_SLOT;
#pragma unroll
    for (int n = 0; n < TILES; ++n) {
      const unsigned kt = slot + (2 * n) * TILE_BYTES, vt = kt + TILE_BYTES;
      unsigned kb[2][4], vb[2][4];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int c = 4 * x + lmat;
        ldmatrix_x4<false>(kb[x], kt + lrow * 128 + ((c ^ lrow) * 16));
        ldmatrix_x4<true>(vb[x], vt + lrow * 128 + ((c ^ lrow) * 16));
      }
      float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // S for row g, positions 2 qd, 2 qd + 1 (then rows 8-15)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) mma_16816(sc, qa[kk], kb[kk / 2][2 * (kk % 2)], kb[kk / 2][2 * (kk % 2) + 1]);
      const int p0 = l0 + r * ROUND + (warp * TILES + n) * 8 + 2 * qd;
      const float s0 = p0 < l1 ? sc[0] * Q_SCALE : -CUDART_INF_F;
      const float s1 = p0 + 1 < l1 ? sc[1] * Q_SCALE : -CUDART_INF_F;
      float mx = fmaxf(s0, s1);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mn = fmaxf(m, mx);
      const float base = mn == -CUDART_INF_F ? 0.0f : mn;  // nothing seen yet: every p is 0
      const float c = exp2f(m - base);
      const float e0 = exp2f(s0 - base), e1 = exp2f(s1 - base);
      l = fmaf(l, c, e0 + e1);
      m = mn;
      const unsigned pa = g < GROUP ? pack_bf16(e0, e1) : 0u;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        acc[j][0] *= c;
        acc[j][1] *= c;
        mma_1688(acc[j], pa, 0u, vb[j / 4][j % 4]);
      }
    }
  }
  wait_copies<0>();
  sync();  // every warp has read its ring slots: the records take their bytes

  // the warp's record: l summed over the 4 lanes of a row, then acc, m and l of rows 0-3
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (g < GROUP) {
    float* rec = red + warp * RECORD;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      rec[g * HEAD_DIM + 8 * j + 2 * qd] = acc[j][0];
      rec[g * HEAD_DIM + 8 * j + 2 * qd + 1] = acc[j][1];
    }
    if (qd == 0) {
      rec[GROUP * HEAD_DIM + g] = m;
      rec[GROUP * HEAD_DIM + GROUP + g] = l;
    }
  }
  sync();
  return merge_states<WARPS>(red, sync);
}

// Sync: a callable that synchronizes the component's 256 threads (its named barrier).
// red: smem_bytes(STAGES, UNROLL) of shared memory. Requires l0 < min(l1, Lmax) for a finite m.
// A walk of RING_ROUNDS rounds or more takes the ring; a shorter one loads each round into registers (a split of
// a few rounds gains nothing from the ring and pays its barrier and shared-memory trip).
// ahead: what a prefetch started (attend_ahead; the tensor-core walk only).
template <int UNROLL, int STAGES, int RING_ROUNDS, int WALK, class Sync>
__device__ __forceinline__ State attend(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                        const bf16* __restrict__ v, int b, int h, int l0, int l1, int Lmax,
                                        float* __restrict__ red, Sync sync, Ahead ahead = {}) {
  if constexpr (WALK == WALK_MMA) return attend_mma<UNROLL, STAGES>(q, k, v, b, h, l0, l1, Lmax, red, sync, ahead);
  static_assert(STAGES >= 2, "attention: a ring of at least two rounds (one computed, one in flight)");
  l1 = min(l1, Lmax);  // L > Lmax is the caller's error: it never reads past the cache
  const int t = threadIdx.x % THREADS;
  const int grp = t / LANES, sub = t % LANES;
  const long long head_base = ((long long)b * KV_HEADS + h) * (long long)Lmax * HEAD_DIM + sub * 8;
  const bf16* kp = k + head_base;
  const bf16* vp = v + head_base;
  const int rounds = (l1 - l0 + GROUPS * UNROLL - 1) / (GROUPS * UNROLL);
  const bool ringed = rounds >= RING_ROUNDS;

  // The ring: round r's K (and V) vector u of this thread at ring[((r % STAGES) * UNROLL + u) * 2 (+ 1)][t], so a
  // quarter warp's 16-byte accesses are 128 contiguous bytes.
  uint4* const ring = reinterpret_cast<uint4*>(red);
  const auto issue = [&](int r) {  // round r's copies (none past the last round), as one cp.async group
    if (r < rounds) {
      uint4* const slot = ring + (r % STAGES) * UNROLL * 2 * THREADS + t;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int p = l0 + (r * UNROLL + u) * GROUPS + grp;
        const bool in = p < l1;
        const long long at = in ? (long long)p * HEAD_DIM : 0;
        copy_cache(slot + (2 * u) * THREADS, kp + at, in ? 16 : 0);
        copy_cache(slot + (2 * u + 1) * THREADS, vp + at, in ? 16 : 0);
      }
    }
    commit_copies();
  };
  if (ringed) {
#pragma unroll
    for (int r = 0; r < STAGES - 1; ++r) issue(r);
  }

  float qf[GROUP][8];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    const bf16* qrow = q + ((long long)b * Q_HEADS + h * GROUP + g) * HEAD_DIM + sub * 8;
    unpack8(__ldcg(reinterpret_cast<const uint4*>(qrow)), qf[g]);
#pragma unroll
    for (int e = 0; e < 8; ++e) qf[g][e] *= Q_SCALE;
  }

  float m[GROUP], l[GROUP], acc[GROUP][8];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    m[g] = -CUDART_INF_F;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }

  // One round: positions base + u * 32 + grp of the UNROLL vectors of K and V (zeros past l1).
  const auto consume = [&](int base, const uint4 (&kv)[UNROLL], const uint4 (&vv)[UNROLL]) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const bool valid = base + u * GROUPS + grp < l1;
      float kf[8];
      unpack8(kv[u], kf);
      float s[GROUP];
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d = fmaf(qf[g][e], kf[e], d);
#pragma unroll
        for (int off = LANES / 2; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
        s[g] = d;
      }
      if (valid) {
        float vf[8];
        unpack8(vv[u], vf);
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
          const float mn = fmaxf(m[g], s[g]);
          const float c = exp2f(m[g] - mn);  // 0 while m is -inf
          const float p = exp2f(s[g] - mn);
          l[g] = fmaf(l[g], c, p);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(acc[g][e], c, p * vf[e]);
          m[g] = mn;
        }
      }
    }
  };

  // r is uniform over the block, so every lane of a warp reaches the shuffles together
  if (ringed) {
    for (int r = 0; r < rounds; ++r) {
      wait_copies<STAGES - 2>();  // this thread's copies of round r have landed
      uint4 kv[UNROLL], vv[UNROLL];
      const uint4* const slot = ring + (r % STAGES) * UNROLL * 2 * THREADS + t;
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        kv[u] = slot[(2 * u) * THREADS];
        vv[u] = slot[(2 * u + 1) * THREADS];
      }
      issue(r + STAGES - 1);  // into the slot round r - 1 left: this thread read it last round
      consume(l0 + r * GROUPS * UNROLL, kv, vv);
    }
    wait_copies<0>();  // nothing of this thread's is in flight (the groups past the last round are empty)
    sync();            // every lane has read its ring slots: the records take their bytes
  } else {
    for (int r = 0; r < rounds; ++r) {
      const int base = l0 + r * GROUPS * UNROLL;
      uint4 kv[UNROLL], vv[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int p = base + u * GROUPS + grp;
        const bool in = p < l1;
        kv[u] = in ? load_cache(kp + (long long)p * HEAD_DIM) : make_uint4(0u, 0u, 0u, 0u);
        vv[u] = in ? load_cache(vp + (long long)p * HEAD_DIM) : make_uint4(0u, 0u, 0u, 0u);
      }
      consume(base, kv, vv);
    }
  }

  float* rec = red + grp * RECORD;
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
#pragma unroll
    for (int e = 0; e < 8; ++e) rec[g * HEAD_DIM + sub * 8 + e] = acc[g][e];
    if (sub == 0) {
      rec[GROUP * HEAD_DIM + g] = m[g];
      rec[GROUP * HEAD_DIM + GROUP + g] = l[g];
    }
  }
  sync();
  return merge_states<GROUPS>(red, sync);
}

// A split's state to its workspace record part[b, h, s, :] (f32: acc [4][64], then m [4] in the log2 domain,
// then l [4]); thread t = 64 * head + d holds head's (m, l, acc[d]) as attend returns them.
__device__ __forceinline__ void write_record(float* __restrict__ part, int b, int h, int s, int splits,
                                             const State& st, int t) {
  const int head = t / HEAD_DIM, d = t % HEAD_DIM;
  float* rec = part + (((long long)b * KV_HEADS + h) * splits + s) * RECORD;
  rec[t] = st.acc;
  if (d == 0) {
    rec[GROUP * HEAD_DIM + head] = st.m;
    rec[GROUP * HEAD_DIM + GROUP + head] = st.l;
  }
}

// Flash-decoding's first half for task (b, h, s): attend split s of the S = split_count(B, L, tasks, min_len)
// splits of the context and write the state to its workspace record (write_record). Returns S.
template <int UNROLL, int STAGES, int RING_ROUNDS, int WALK, class Sync>
__device__ __forceinline__ int attend_split(const bf16* __restrict__ q, const bf16* __restrict__ k,
                                            const bf16* __restrict__ v, float* __restrict__ part, int b, int h, int s,
                                            int B, int L, int Lmax, int tasks, int min_len, float* red, Sync sync,
                                            int t, Ahead ahead = {}) {
  const int splits = split_count(B, L, tasks, min_len);
  const int l0 = split_begin(s, splits, L), l1 = split_begin(s + 1, splits, L);
  const State state = attend<UNROLL, STAGES, RING_ROUNDS, WALK>(q, k, v, b, h, l0, l1, Lmax, red, sync, ahead);
  if (t == 0) pl_component::profile_mark(0);  // the split walked (profiled links only, else folded away)
  write_record(part, b, h, s, splits, state, t);
  return splits;
}

// A prefetch of positions [l0, l1) for the walk WALK: the tensor-core walk's first rounds; the lane walk starts none.
template <int UNROLL, int STAGES, int WALK>
__device__ __forceinline__ Ahead attend_range_ahead(const bf16* __restrict__ k, const bf16* __restrict__ v, int b,
                                                    int h, int l0, int l1, int Lmax, int skip, float* red) {
  if constexpr (WALK != WALK_MMA) {
    return Ahead{};
  } else {
    return attend_ahead<UNROLL, STAGES>(k, v, b, h, l0, l1, Lmax, skip, red);
  }
}

// attend_split's prefetch: the split's first rounds of K and V.
template <int UNROLL, int STAGES, int WALK>
__device__ __forceinline__ Ahead attend_split_ahead(const bf16* __restrict__ k, const bf16* __restrict__ v, int b, int h,
                                                    int s, int B, int L, int Lmax, int tasks, int min_len, int skip,
                                                    float* red) {
  const int splits = split_count(B, L, tasks, min_len);
  return attend_range_ahead<UNROLL, STAGES, WALK>(k, v, b, h, split_begin(s, splits, L), split_begin(s + 1, splits, L),
                                                  Lmax, skip, red);
}

// One split's state folded into a running merge: (m, l) take the split's (ms, ls), and the returned weights scale
// the running acc and the split's (fold_acc). The one form of the merge's arithmetic, for merge_records and
// merge_vectors alike, so that the two give o bit for bit.
struct Fold {
  float c, w;  // the running state's weight, the split's
};
__device__ __forceinline__ Fold fold(float& m, float& l, float ms, float ls) {
  const float mn = fmaxf(m, ms);
  const float c = exp2f(m - mn);  // 0 for the first split
  const float w = exp2f(ms - mn);
  l = fmaf(l, c, ls * w);
  m = mn;
  return {c, w};
}
__device__ __forceinline__ float fold_acc(float acc, Fold f, float as) { return fmaf(acc, f.c, as * f.w); }

// The second half of flash-decoding for (b, h): thread t = 64 * g + d merges the `splits` records of query
// head 4h + g in split order and writes o = acc / l, rounded once to bf16. The records were written in this
// launch by other CTAs: loads through L2 (__ldcg), never the read-only cache.
__device__ __forceinline__ void merge_records(const float* __restrict__ part, bf16* __restrict__ o, int b, int h,
                                              int splits, int t) {
  const int head = t / HEAD_DIM;
  const float* rec = part + ((long long)b * KV_HEADS + h) * splits * RECORD;
  float m = -CUDART_INF_F, l = 0.0f, acc = 0.0f;
  // IN_FLIGHT records' loads are issued before any is combined: the merge is a chain of L2 round trips
  // otherwise (up to SPLIT_TASKS / 8 splits at batch 1). 16: one round trip for the 16 splits of batch 1 at
  // context 1024 (8 took two and a slower step; 32 at once, slower still at 1024: PERFORMANCE.md)
  constexpr int IN_FLIGHT = 16;
  for (int s0 = 0; s0 < splits; s0 += IN_FLIGHT, rec += IN_FLIGHT * RECORD) {
    float ms[IN_FLIGHT], ls[IN_FLIGHT], as[IN_FLIGHT];
#pragma unroll
    for (int i = 0; i < IN_FLIGHT; ++i) {
      const bool in = s0 + i < splits;
      const float* r = rec + i * RECORD;
      ms[i] = in ? __ldcg(r + GROUP * HEAD_DIM + head) : -CUDART_INF_F;
      ls[i] = in ? __ldcg(r + GROUP * HEAD_DIM + GROUP + head) : 0.0f;
      as[i] = in ? __ldcg(r + t) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < IN_FLIGHT; ++i) {
      if (s0 + i >= splits) break;  // every split covers at least one position: its m is finite
      acc = fold_acc(acc, fold(m, l, ms[i], ls[i]), as[i]);
    }
  }
  o[((long long)b * Q_HEADS + h * GROUP) * HEAD_DIM + t] = __float2bfloat16_rn(acc / l);
}

// merge_records for 8 consecutive elements of o in each of nb batch rows: o[b, qh, d0 .. d0 + 7] for b = b0 ..
// b0 + nb - 1 (query head qh, d0 a multiple of 8), each from the `splits` records of (b, qh / GROUP) in split order
// with merge_records' arithmetic (fold), divided by l and rounded once to bf16 as merge_records rounds it: the same
// bits, for a consumer that merges the states itself instead of reading o. out(b, v) takes row b's 16 bytes. The
// rows' records are one sequence (row by row, split by split) of which IN_FLIGHT records' loads (two 16-byte
// vectors of acc, m, l) go out before any is folded in, so a row of few splits shares its round trip with the
// next rows'. The records were written in this launch: loads through L2.
template <int IN_FLIGHT, class Out>
__device__ __forceinline__ void merge_vectors(const float* __restrict__ part, int b0, int nb, int qh, int d0,
                                              int splits, Out out) {
  const int h = qh / GROUP, g = qh % GROUP, n = nb * splits;
  float m = -CUDART_INF_F, l = 0.0f, acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
  int b = b0, s = 0;  // the record the next fold takes
  for (int j0 = 0; j0 < n; j0 += IN_FLIGHT) {
    float ms[IN_FLIGHT], ls[IN_FLIGHT];
    float4 as[IN_FLIGHT][2];
    int lb = b, lsp = s;  // the record the next load takes
#pragma unroll
    for (int i = 0; i < IN_FLIGHT; ++i) {
      const bool in = j0 + i < n;
      const float* r = part + (((long long)lb * KV_HEADS + h) * splits + lsp) * RECORD;
      ms[i] = in ? __ldcg(r + GROUP * HEAD_DIM + g) : -CUDART_INF_F;
      ls[i] = in ? __ldcg(r + GROUP * HEAD_DIM + GROUP + g) : 0.0f;
      const float4* a = reinterpret_cast<const float4*>(r + g * HEAD_DIM + d0);
      as[i][0] = in ? __ldcg(a) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      as[i][1] = in ? __ldcg(a + 1) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (++lsp == splits) lsp = 0, ++lb;
    }
#pragma unroll
    for (int i = 0; i < IN_FLIGHT; ++i) {
      if (j0 + i >= n) break;
      const Fold f = fold(m, l, ms[i], ls[i]);
      const float a[8] = {as[i][0].x, as[i][0].y, as[i][0].z, as[i][0].w,
                          as[i][1].x, as[i][1].y, as[i][1].z, as[i][1].w};
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = fold_acc(acc[e], f, a[e]);
      if (++s == splits) {  // row b's splits all folded in: its o, and a fresh state for the next row
        uint4 v;
        __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o2[e] = __halves2bfloat162(__float2bfloat16_rn(acc[2 * e] / l), __float2bfloat16_rn(acc[2 * e + 1] / l));
        out(b, v);
        m = -CUDART_INF_F, l = 0.0f, s = 0, ++b;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
      }
    }
  }
}

}  // namespace attn_body
