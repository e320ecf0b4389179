// moe_router, classic build: this team's constants, hard-coded (a variant passes -D to change one).
#pragma once
#include "../integration/classic_common.h"
#ifndef ROUTER_TOKENS_VALUE
#define ROUTER_TOKENS_VALUE 32
#endif
namespace pl { namespace moe_router {
CLASSIC_THREADS_API
constexpr int ROUTER_TOKENS = ROUTER_TOKENS_VALUE;
constexpr int ROUTER_K_CHUNK = 64;
constexpr int ROUTER_STAGES = 4;
constexpr int ROUTER_MAX_EXPERTS = 128;
CLASSIC_SMEM(stages, 0)
} }
