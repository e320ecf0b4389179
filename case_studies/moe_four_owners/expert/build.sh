#!/usr/bin/env bash
# The expert team's build of its component, kept with its sources:
#   build.sh pipelink OUT_DIR   against its contract (CONTRACT=path overrides expert.json)
#   build.sh classic OUT_DIR    with the constants it hard-coded (classic.h; DEFINES adds -D flags)
#   build.sh split OUT_DIR      moe_expert_split and moe_expert_merge against their contracts
#   build.sh hopper OUT_DIR     moe_expert_hopper (sm_90a: wgmma) and moe_expert_merge against their contracts
set -euo pipefail
py="${PYTHON:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
mode="$1" out="$2"
mkdir -p "$out"
if [ "$mode" = pipelink ]; then
  exec "$py" -m pipelink.cli build "$here/expert.cu" --contract "${CONTRACT:-$here/expert.json}" --arch sm_90 -o "$out/moe_expert.o"
fi
if [ "$mode" = split ]; then
  "$py" -m pipelink.cli build "$here/expert_split.cu" --contract "$here/expert_split.json" --arch sm_90 -o "$out/moe_expert_split.o"
  exec "$py" -m pipelink.cli build "$here/expert_merge.cu" --contract "$here/expert_merge.json" --arch sm_90 -o "$out/moe_expert_merge.o"
fi
if [ "$mode" = hopper ]; then
  "$py" -m pipelink.cli build "$here/expert_hopper.cu" --contract "$here/expert_hopper.json" --arch sm_90a -o "$out/moe_expert_hopper.o"
  exec "$py" -m pipelink.cli build "$here/expert_merge.cu" --contract "$here/expert_merge.json" --arch sm_90 -o "$out/moe_expert_merge.o"
fi
root="$("$py" -c 'from pipelink import toolchain; print(toolchain.cuda_root())')"  # the pinned toolchain
export PATH="$root/bin:$PATH" LD_LIBRARY_PATH="$root/lib:${LD_LIBRARY_PATH:-}"
exec nvcc -dc -std=c++17 -O3 -gencode=arch=compute_90,code=lto_90 -DMOE_CLASSIC ${DEFINES:-} \
  -I"$here" -I"$here/../integration" "$here/expert.cu" -o "$out/classic_moe_expert.o"
