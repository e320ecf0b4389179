// moe_dispatch, classic build: this team's constants, and the expert tile it assumed (32 rows).
#pragma once
#include "../integration/classic_common.h"
#ifndef DISPATCH_TOKENS_VALUE
#define DISPATCH_TOKENS_VALUE 64
#endif
namespace pl { namespace moe_dispatch {
CLASSIC_THREADS_API
constexpr int DISPATCH_TOKENS = DISPATCH_TOKENS_VALUE;
constexpr int DISPATCH_MAX_EXPERTS = 128;
__device__ __forceinline__ int EXPERT_TILE_M() { return 32; }  // the expert team's tile, as agreed
CLASSIC_SMEM(counts, 0)
} }
