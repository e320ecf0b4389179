"""Small shapes through every kernel of the case study, each launch watched: a launch that does not
finish within a few seconds is reported by name (a hang) and the process exits.

    python case_studies/qwen3_32b_mlp/smoke.py
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

try:
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError:  # building and linking need neither: build.py
    print(f"{Path(sys.argv[0]).name} runs the kernels: it needs torch and a CUDA GPU (build.py builds and links "
          "without them)", file=sys.stderr)
    sys.exit(2)

from pipelink.runtime.launch import Kernel  # noqa: E402


def load(name: str) -> Kernel:
    build = HERE / "build"
    return Kernel.load((build / f"{name}.cubin").read_bytes(), json.loads((build / f"{name}.json").read_text()))


def watched(what: str, step, seconds: float = 10.0) -> None:
    step()
    done = torch.cuda.Event()
    done.record()
    start = time.time()
    while not done.query():
        if time.time() - start > seconds:
            print(f"HANG: {what} did not finish in {seconds} s", flush=True)
            os._exit(3)
        time.sleep(0.001)


# Ragged edges (N = 1040: the SwiGLU output's rows stay 16-byte aligned for its TMA store), one CTA
# walking many tiles, stream-K splits on the automatic grid and on a caller's (grid 7: whole rounds,
# then split tiles), a long K over few tiles (each tile split over many CTAs), and several rows of
# tiles in equal pieces (split-K, on every SM and on 5 CTAs walking several pieces each).
SHAPES = [(64, 128, 64, 1), (128, 256, 64, 1), (128, 256, 512, None), (300, 1040, 640, 1), (300, 1040, 640, None),
          (300, 1040, 640, 7), (16, 4096, 1024, None), (16, 512, 8192, None), (256, 1040, 4096, None),
          (256, 1024, 4096, 5)]
CASES = [(tile, kind, *shape) for tile in ("64x128", "128x256", "128x128") for kind in ("plain", "swiglu", "residual")
         for shape in SHAPES]


def main() -> int:
    """Each case in a process of its own: a hang stops only that case."""
    import subprocess
    only = [int(a) for a in sys.argv[1:]]
    if only:
        return run_cases([CASES[i] for i in only])
    bad = 0
    per_kernel = len(SHAPES)  # one process per kernel: a hang stops that kernel's cases only
    for first in range(0, len(CASES), per_kernel):
        ids = [str(i) for i in range(first, first + per_kernel)]
        try:
            proc = subprocess.run([sys.executable, __file__, *ids], capture_output=True, text=True, timeout=120)
            out = proc.stdout.strip().splitlines()
            print("\n".join(out) if out else f"cases {ids}: no output (exit {proc.returncode})", flush=True)
            if proc.returncode != 0 and proc.stderr.strip():
                print("  " + proc.stderr.strip().splitlines()[-1], flush=True)
            bad += proc.returncode != 0
        except subprocess.TimeoutExpired:
            print(f"cases {ids}: timed out", flush=True)
            bad += 1
    print("all correct" if not bad else f"{bad} wrong or hung")
    return 1 if bad else 0


def run_cases(cases) -> int:
    dev = torch.device("cuda")
    torch.manual_seed(int(time.time()))
    bad = 0
    for tile, kind, M, N, K, grid in cases:
            k = load(f"{kind}_{tile}")
            if True:
                x = torch.randn(M, K, device=dev).bfloat16()
                w = (torch.randn(N, K, device=dev) / K ** 0.5).bfloat16()
                ref = x.float() @ w.float().T
                if kind == "plain":
                    out = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
                    args = dict(a=x, b=w, M=M, N=N, K=K, d=out)
                elif kind == "swiglu":
                    out = torch.full((M, N // 2), float("nan"), device=dev, dtype=torch.bfloat16)
                    args = dict(a=x, b=w, M=M, N=N, K=K, h=out)
                    ref = F.silu(ref[:, 0::2]) * ref[:, 1::2]
                else:
                    bias = torch.randn(N, device=dev).bfloat16()
                    res = torch.randn(M, N, device=dev).bfloat16()
                    out = torch.full((M, N), float("nan"), device=dev, dtype=torch.bfloat16)
                    args = dict(a=x, b=w, M=M, N=N, K=K, y=out, bias=bias, residual=res)
                    ref = ref + bias.float() + res.float()
                what = f"{kind}_{tile} M={M} N={N} K={K} grid={grid or 'auto'}"
                watched(what, lambda: k.launch(grid=grid, **args))
                torch.cuda.synchronize()
                err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
                ok = err < 2e-2
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {what}: max error {err:.2e}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
