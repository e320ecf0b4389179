#!/usr/bin/env bash
# The norm team's build of its component against its contract:
#   build.sh OUT_DIR    -> OUT_DIR/rmsnorm.o   (CONTRACT=path overrides rmsnorm.json; PYTHON picks the interpreter)
set -euo pipefail
py="${PYTHON:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
mkdir -p "$out"
exec "$py" -m pipelink.cli build "$here/rmsnorm.cu" --contract "${CONTRACT:-$here/rmsnorm.json}" -o "$out/rmsnorm.o"
