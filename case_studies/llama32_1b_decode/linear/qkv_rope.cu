// qkv_rope: the fused q/k/v projection of one decode step with the rotary embedding and the KV-cache append.
// W_qkv [3072, K] stacks the 32 q heads, the 8 k heads and the 8 v heads of 64 rows each (q_proj, k_proj,
// v_proj concatenated). Task (hd, j) of head hd owns the QKV_ROWS rows hd * 64 + {Pj .. Pj+P-1} and hd * 64 +
// 32 + {Pj .. Pj+P-1}, P = QKV_ROWS / 2: P rotary pairs (d, d + 32), walked by gemv.cuh. The fp32 sums meet
// in shared memory (res); thread Pb + p then rotates pair d = Pj + p of batch row b by the angle
// pos[b] * inv_freq[d] (the half-split convention of Llama: out[d] = x[d] cos - x[d+32] sin,
// out[d+32] = x[d+32] cos + x[d] sin; inv_freq the host's f32 frequencies, Llama-3 scaling included; the
// angle, cos and sin in fp64, through sincospi) and rounds once to bf16:
//   q heads (hd < 32): rotated, to q[b, hd, :];
//   k heads (32 <= hd < 40): rotated, to k_cache[b * 8 + hd - 32, pos[b], :];
//   v heads (40 <= hd < 48): as they are, to v_cache[b * 8 + hd - 40, pos[b], :].
// A position outside [0, Lmax) writes q (rotated by it) but nothing to the caches. The body is
// qkv_rope.cuh's, shared with qkv_rope_normed.
#include "qkv_rope.pipelink.h"
#include "qkv_rope.cuh"

using namespace pl::qkv_rope;
static_assert(smem_xs_bytes >= GEMV_BATCH * GEMV_KCHUNK * 2, "contract qkv_rope: smem.buffers.xs is too small");
static_assert(smem_sums_bytes >= gemv_body::sums_floats<WARPS, QKV_ROWS> * 4, "contract qkv_rope: smem.buffers.sums is too small");
static_assert(smem_res_bytes >= GEMV_BATCH * QKV_ROWS * 4, "contract qkv_rope: smem.buffers.res is too small");

extern "C" __device__ void qkv_rope(pl::Tile tile, const __nv_bfloat16* __restrict__ w,
                                    const __nv_bfloat16* __restrict__ x, const int* __restrict__ pos,
                                    const float* __restrict__ inv_freq, __nv_bfloat16* __restrict__ q,
                                    __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache, int B,
                                    int K, int Lmax) {
  qkv_body::task<WARPS, QKV_ROWS, GEMV_KCHUNK, GEMV_BATCH>(
      tile.coord[0], tile.coord[1], w, gemv_body::StageRaw{x, K}, pos, inv_freq, q, k_cache, v_cache, B, K, Lmax,
      smem_xs<uint4>(), smem_res<float>(), smem_sums<float>(), tile.continues, [] { sync_stage(); });
}
