"""Every kernel of the case study once on small shapes, for compute-sanitizer (no benchmark):

    compute-sanitizer --tool memcheck python case_studies/qwen3_32b_mlp/sanitize.py
    compute-sanitizer --tool racecheck python case_studies/qwen3_32b_mlp/sanitize.py
    compute-sanitizer --tool synccheck python case_studies/qwen3_32b_mlp/sanitize.py

Shapes: ragged edges, one CTA walking several tiles, tiles split over CTAs (stream-K) on the
automatic grid and on a caller's, whole tiles, and several rows in equal pieces (split-K). Exit 1 on a wrong output.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from smoke import run_cases  # noqa: E402

SHAPES = [(300, 1040, 640, 1), (300, 1040, 640, 7), (16, 512, 2048, None), (256, 1024, 4096, None)]
CASES = [(tile, kind, *shape) for tile in ("64x128", "128x256", "128x128") for kind in ("plain", "swiglu", "residual")
         for shape in SHAPES]

if __name__ == "__main__":
    sys.exit(run_cases(CASES))
