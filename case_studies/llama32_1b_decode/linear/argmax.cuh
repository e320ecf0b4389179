// The greedy-argmax key lm_head and argmax_merge share: a bf16 logit v at vocabulary index n as one
// unsigned 64-bit word whose unsigned order is (v ascending, then n descending), so the maximum key over
// any set of (v, n) is the largest logit at its lowest index: the first maximum, as torch.argmax picks it.
// High 32 bits: the float's bits made order-preserving (negative: all bits flipped; else the sign bit
// set), -0 taken as +0 so the two zeros tie; low 32 bits: 0xffffffff - n. Every valid key is above 0, the
// key of "no row". NaN logits are not ordered (a NaN sorts above +inf if its sign bit is clear, below -inf
// if set); torch.argmax would pick the first NaN.
#pragma once
#include <cuda_bf16.h>

namespace argmax_key {

__device__ __forceinline__ unsigned long long make(float v, int n) {
  if (v == 0.0f) v = 0.0f;  // -0 -> +0
  const unsigned u = __float_as_uint(v);
  const unsigned ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((unsigned long long)ord << 32) | (unsigned long long)(0xffffffffu - (unsigned)n);
}

__device__ __forceinline__ int index(unsigned long long key) {
  return (int)(0xffffffffu - (unsigned)(key & 0xffffffffull));
}

}  // namespace argmax_key
