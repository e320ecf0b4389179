#!/usr/bin/env bash
# The linear team's build of its components against their contracts:
#   build.sh OUT_DIR [NAME...]   -> OUT_DIR/NAME.o for gemv_bf16, gemv_residual, gemv_normed, qkv_rope,
#                                   gemv_swiglu, lm_head, argmax_merge, qkv_rope_normed, gemv_swiglu_normed,
#                                   gemv_residual_ring, gemv_swiglu_normed_ring, qkv_rope_normed_ring, lm_head_ring
#                                   (default: all thirteen)
# PYTHON picks the interpreter that runs pipelink.
set -euo pipefail
py="${PYTHON:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
shift
mkdir -p "$out"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(gemv_bf16 gemv_residual gemv_normed qkv_rope gemv_swiglu lm_head argmax_merge qkv_rope_normed
                                    gemv_swiglu_normed gemv_residual_ring gemv_swiglu_normed_ring qkv_rope_normed_ring
                                    lm_head_ring)
for name in "${names[@]}"; do
  "$py" -m pipelink.cli build "$here/$name.cu" --contract "$here/$name.json" -o "$out/$name.o"
done
