#!/usr/bin/env bash
# The attention team's build of its components against their contracts:
#   build.sh OUT_DIR [NAME...]   -> OUT_DIR/NAME.o for attn_head, attn_split, attn_merge, attn_last (default: all four)
# PYTHON picks the interpreter that runs pipelink.
set -euo pipefail
py="${PYTHON:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
shift
mkdir -p "$out"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(attn_head attn_split attn_merge attn_last)
for name in "${names[@]}"; do
  "$py" -m pipelink.cli build "$here/$name.cu" --contract "$here/$name.json" -o "$out/$name.o"
done
