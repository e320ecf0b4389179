// moe_router, classic build: this team's constants, hard-coded (a variant passes -D to change one).
#pragma once
#include "../integration/classic_common.h"
#ifndef ROUTER_TOKENS_VALUE
#define ROUTER_TOKENS_VALUE 32
#endif
namespace pl { namespace moe_router {
CLASSIC_THREADS_API
constexpr int ROUTER_TOKENS = ROUTER_TOKENS_VALUE;
constexpr int ROUTER_EXPERTS_PER_CHUNK = 64;
constexpr int ROUTER_K_CHUNK = 128;
constexpr int ROUTER_MAX_EXPERTS = 128;
CLASSIC_SMEM(logits, 0)
CLASSIC_SMEM(x_chunk, ROUTER_TOKENS * (ROUTER_MAX_EXPERTS + 4) * 4)
} }
