// moe_expert, classic build: this team's constants, hard-coded (a variant passes -D to change one).
#pragma once
#include "../integration/classic_common.h"
#ifndef EXPERT_TILE_M_VALUE
#define EXPERT_TILE_M_VALUE 32
#endif
#ifndef EXPERT_STAGES_VALUE
#define EXPERT_STAGES_VALUE 6
#endif
namespace pl { namespace moe_expert {
CLASSIC_THREADS_API
constexpr int EXPERT_TILE_M = EXPERT_TILE_M_VALUE;
constexpr int EXPERT_STAGES = EXPERT_STAGES_VALUE;
constexpr int EXPERT_MAX_INTER = 768;
constexpr unsigned smem_stages_bytes = EXPERT_STAGES * (EXPERT_TILE_M + 128) * 72 * 2;
constexpr unsigned smem_h_bytes = EXPERT_TILE_M * (EXPERT_MAX_INTER + 8) * 2;
constexpr unsigned smem_tokens_bytes = EXPERT_TILE_M * 4;
CLASSIC_SMEM(stages, 0)
CLASSIC_SMEM(h, smem_stages_bytes)
CLASSIC_SMEM(tokens, smem_stages_bytes + smem_h_bytes)
} }
