// The share of an expert tile that a task (i, j) of moe_expert_split or moe_expert_hopper takes: the tile's
// expert (written by moe_dispatch in this launch: read through L2), and share j of the I columns,
// ceil_div(I / 64, splits) blocks of 64 (the last shares possibly empty). A share of all I columns is the
// tile's only one: its task writes the tile's bf16 ys rows itself, and moe_expert_merge has nothing to add
// (no fp32 round trip through part when the tiles alone fill the GPU).
#pragma once

struct ExpertShare {
  int expert, c0, c1;  // columns [c0, c1) of I
  bool alone;          // [c0, c1) is all of I: write ys, not part
};

// False when the task has nothing to do: past the last used tile, or an empty share (moe_expert_merge adds
// only the shares with columns). A share wider than `share_max` (too few splits for the task's h buffer:
// the contracts say splits >= I / EXPERT_SHARE_MAX) traps.
__device__ __forceinline__ bool expert_share(int i, int j, const int* __restrict__ tile_expert, int I, int splits,
                                             int share_max, ExpertShare& s) {
  s.expert = __ldcg(tile_expert + i);
  if (s.expert < 0) return false;
  const int per = (I / 64 + splits - 1) / splits;
  s.c0 = min(I, j * per * 64), s.c1 = min(I, s.c0 + per * 64);
  if (s.c0 >= s.c1) return false;
  if (s.c1 - s.c0 > share_max) __trap();
  s.alone = s.c0 == 0 && s.c1 == I;
  return true;
}
