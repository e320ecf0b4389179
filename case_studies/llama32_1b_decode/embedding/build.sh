#!/usr/bin/env bash
# The embedding team's build of its component against its contract:
#   build.sh OUT_DIR    -> OUT_DIR/embed.o   (CONTRACT=path overrides embed.json; PYTHON picks the interpreter)
set -euo pipefail
py="${PYTHON:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
mkdir -p "$out"
exec "$py" -m pipelink.cli build "$here/embed.cu" --contract "${CONTRACT:-$here/embed.json}" -o "$out/embed.o"
