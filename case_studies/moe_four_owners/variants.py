"""The modified-geometry test: one team changes one geometric constant of its own component and
rebuilds only that component. Each variant is linked classically (plain nvJitLink, every other
team's assumption still hard-coded) and with pipelink, then run under a watchdog and classified."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from builds import Change

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Variant:
    name: str
    change: Change
    what: str


VARIANTS = (
    Variant("expert-tile-rows", Change("expert", "EXPERT_TILE_M", 16),
            "expert team: 16-row GEMM tiles instead of 32, less padding at few tokens (dispatch pads segments to "
            "the expert tile)"),
    Variant("dispatch-tokens", Change("dispatch", "DISPATCH_TOKENS", 32),
            "dispatch team: 32 tokens per dispatch task instead of 64"),
    Variant("router-tokens", Change("router", "ROUTER_TOKENS", 16),
            "routing team: 16 tokens per router task instead of 32"),
    Variant("expert-stages", Change("expert", "EXPERT_STAGES", 7),
            "expert team: a 7-stage cp.async pipeline instead of 6 (more shared memory)"),
    Variant("combine-width", Change("combine", "COMBINE_TILE_N", 1024),
            "combine team: 1024 columns per combine task instead of 2048"),
    Variant("expert-tile-rows-128", Change("expert", "EXPERT_TILE_M", 128),
            "expert team: 128-row GEMM tiles (the tile no longer fits in shared memory)"),
)

WATCHDOG_S = 10.0   # after the launch: a kernel still running then is hung (a correct one takes ms)
CHILD_LIMIT_S = 60.0


def classify_child(world: str, cubin: Path, manifest: Path | None, shape: str, T: int, seed: int) -> dict:
    """Run one linked kernel in a child process (a hang or a fault must not take this one down)."""
    cmd = [sys.executable, str(HERE / "run.py"), "child", "--world", world, "--cubin", str(cubin),
           "--shape", shape, "--tokens", str(T), "--seed", str(seed)]
    if manifest is not None:
        cmd += ["--manifest", str(manifest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        return {"outcome": "hang", "detail": f"no exit within {CHILD_LIMIT_S:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"outcome": "fault", "detail": " / ".join(tail) or f"exit {proc.returncode}"}


def child_main(world: str, cubin: Path, manifest: Path | None, shape_name: str, T: int, seed: int) -> dict:
    """In the child: load, launch once on fresh inputs and poisoned outputs, watch, judge."""
    import time

    import torch

    import layer
    import launchers
    shape = layer.SHAPES[shape_name]
    if world == "pipelink":
        from pipelink.core.jsonread import parse
        from pipelink.runtime.launch import Kernel
        doc = parse(manifest.read_bytes())
        impl = launchers.PipelinkLayer(Kernel.load(cubin.read_bytes(), doc), doc["geometry"])
    else:
        impl = launchers.ClassicFused(cubin.read_bytes())
    weights = layer.make_weights(shape, seed)
    x = layer.make_tokens(shape, T, seed + 1)
    buffers = layer.poisoned_buffers(impl.layout(shape, T))
    torch.cuda.synchronize()
    done = torch.cuda.Event()
    try:
        impl.run(shape, x, weights, buffers)
        done.record()
        deadline = time.monotonic() + WATCHDOG_S
        while not done.query():
            if time.monotonic() > deadline:
                return {"outcome": "hang", "detail": f"still running {WATCHDOG_S:.0f} s after the launch"}
            time.sleep(0.01)
        torch.cuda.synchronize()
    except Exception as exc:  # a fault (the context is gone) or a debug build's EventTimeout
        kind = "hang" if type(exc).__name__ == "EventTimeout" else "fault"
        return {"outcome": kind, "detail": " ".join(str(exc).split())[:300]}
    v = layer.judge(shape, x, weights, buffers)
    if v.ok:
        return {"outcome": "correct", "detail": f"max error {v.max_err:.3g} x rms; {v.routing_detail}"}
    if not v.routing_ok:
        return {"outcome": "wrong values", "detail": v.routing_detail}
    if v.unwritten:
        return {"outcome": "outputs left unwritten",
                "detail": f"{v.unwritten} of {T * shape.H} output elements never written"}
    return {"outcome": "wrong values", "detail": f"max error {v.max_err:.3g} x rms (tolerance {v.tolerance})"}
