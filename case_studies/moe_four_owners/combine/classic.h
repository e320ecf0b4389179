// moe_combine, classic build: this team's constant, hard-coded (a variant passes -D to change it).
#pragma once
#include "../integration/classic_common.h"
#ifndef COMBINE_TILE_N_VALUE
#define COMBINE_TILE_N_VALUE 2048
#endif
namespace pl { namespace moe_combine {
CLASSIC_THREADS_API
constexpr int COMBINE_TILE_N = COMBINE_TILE_N_VALUE;
} }
