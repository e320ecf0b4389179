"""tile.continues on its own: a component that counts, in a scratch word, the tasks its CTA ran of the current
call (restarting at 0 unless the task continues the call), and one that clobbers the scratch bytes both share.
Linked as calls (the counter twice, the clobber between, optionally per layer) under both dispatches, and as a
sequential kernel of one component. CPU: they build and link. GPU: on every CTA the counts of each call, in
task order, are 1, 2, 3, ...: a task continues only its own call, never another call of the same component,
the same call of another layer, or a clobbered scratch."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

COUNT_SRC = r'''
#include "run_count.pipelink.h"
using namespace pl::run_count;
// out[task] = how many tasks of this call this CTA ran so far, this one included; cta[task] = the CTA.
extern "C" __device__ void run_count(pl::Tile tile, int* __restrict__ out, int* __restrict__ cta, int N) {
  int* const count = smem_count<int>();
  if (thread_rank() == 0) {
    if (!tile.continues) count[0] = 0;
    count[0] += 1;
    out[tile.linear] = count[0];
    cta[tile.linear] = (int)blockIdx.x;
  }
}
'''

CLOBBER_SRC = r'''
#include "clobber.pipelink.h"
using namespace pl::clobber;
// Writes its scratch (the bytes other components' scratch shares in a persistent kernel) and marks its task.
extern "C" __device__ void clobber(pl::Tile tile, int* __restrict__ done, int N) {
  if (thread_rank() == 0) {
    smem_junk<int>()[0] = 1 << 20;
    done[tile.linear] = 1;
  }
}
'''


def contract(name: str, params: list, buffer: str) -> dict:
    return {
        "pipelink_contract": 1, "name": name, "version": "1.0.0", "owner": "test-team",
        "entry": {"symbol": name, "params": params},
        "targets": {"archs": ["sm_90"]},
        "threads": {"warps": 1},
        "smem": {"buffers": [{"name": buffer, "bytes": 16, "align": 16, "lifetime": "scratch", "phase": "task"}]},
        "geometry": {"tile_sequence": {"grid": ["N"], "order": "row_major", "distribution": "grid_stride"}},
    }


COUNT = contract("run_count", [{"name": "out", "dtype": "i32", "pointer": True, "shape": ["N"]},
                               {"name": "cta", "dtype": "i32", "pointer": True, "shape": ["N"]},
                               {"name": "N", "dtype": "i32"}], "count")
CLOBBER = contract("clobber", [{"name": "done", "dtype": "i32", "pointer": True, "shape": ["N"]},
                               {"name": "N", "dtype": "i32"}], "junk")


def calls(dispatch: str, layered: bool) -> dict:
    """run_count as `first` (N1 tasks), clobber (N2), run_count as `second` (N1); per layer or once."""
    per = {"per_layer": True} if layered else {}
    doc = {"pipeline": 1, "name": f"continues_{dispatch}{'_layers' if layered else ''}", "dispatch": dispatch,
           "calls": [{"name": "first", "component": "run_count", **per,
                      "bind": {"out": "out1", "cta": "cta1", "N": "N1"}},
                     {"name": "clobber", **per, "bind": {"N": "N2"}},
                     {"name": "second", "component": "run_count", **per,
                      "bind": {"out": "out2", "cta": "cta2", "N": "N1"}}]}
    if layered:  # each layer writes its own copy of the outputs
        doc["layers"] = "NL"
        for c in doc["calls"]:
            c["stacked"] = ["done"] if c["name"] == "clobber" else ["out", "cta"]
    return doc


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("continues")
    out = {}
    for name, src, doc in (("run_count", COUNT_SRC, COUNT), ("clobber", CLOBBER_SRC, CLOBBER)):
        (d / f"{name}.cu").write_text(src)
        (d / f"{name}.json").write_text(json.dumps(doc, indent=2))
        out[name] = d / f"{name}.o"
        proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "build", str(d / f"{name}.cu"), "--contract",
                               str(d / f"{name}.json"), "--arch", "sm_90", "-o", str(out[name])],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    return out


KINDS = [("static", False), ("dynamic", False), ("static", True), ("dynamic", True)]


def link(objects, tmp_path, dispatch, layered):
    import pipelink
    p = tmp_path / f"{dispatch}_{layered}.json"
    p.write_text(json.dumps(calls(dispatch, layered)))
    linked = pipelink.link([str(objects["run_count"]), str(objects["clobber"])], pipeline=str(p))
    assert linked.ok, [d.render() for d in linked.diagnostics]
    return linked


@pytest.mark.parametrize("dispatch,layered", KINDS)
def test_the_counting_calls_link(objects, tmp_path, dispatch, layered):
    linked = link(objects, tmp_path, dispatch, layered)
    assert "tile.continues = " in linked.glue and linked.manifest.schedule == "persistent"
    # the counter's scratch word and the clobber's share their bytes: a wrong `continues` reads the clobber's
    for buffer in ("first.count", "clobber.junk"):
        assert re.search(rf"^\s+0\s+16\s+16\s+step \d+ phase task buffer {buffer}$", linked.link_map, re.M), buffer


def test_a_lone_counter_links_as_a_sequential_kernel(objects):
    import pipelink
    linked = pipelink.link([str(objects["run_count"])])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert "tile.continues = (it != 0);" in linked.glue


def check_counts(out, cta, what: str):
    """Per CTA, its tasks in task order count 1, 2, 3, ... (claims and static walks both go up)."""
    per = {}
    for task, (n, c) in enumerate(zip(out, cta)):
        per.setdefault(c, []).append((task, n))
    for c, tasks in per.items():
        counts = [n for _, n in sorted(tasks)]
        assert counts == list(range(1, len(counts) + 1)), f"{what}: CTA {c} counted {counts[:12]}"


@pytest.mark.gpu
@pytest.mark.parametrize("dispatch,layered", KINDS)
def test_a_task_continues_only_its_own_call(objects, tmp_path, dispatch, layered):
    import torch
    kernel = link(objects, tmp_path, dispatch, layered).kernel()
    try:
        rng = int.from_bytes(os.urandom(2), "little")
        for N1, N2, NL, grid in ((1, 1, 2, None), (1000, 7, 3, None), (333 + rng % 100, 50, 2, 5), (64, 3000, 1, 2)):
            layers = NL if layered else 1
            shape = (layers, N1) if layered else (N1,)
            poisoned = lambda *s: torch.full(s, -7, dtype=torch.int32, device="cuda")  # noqa: E731
            out1, cta1, out2, cta2 = (poisoned(*shape) for _ in range(4))
            done = poisoned(*((layers, N2) if layered else (N2,)))
            args = dict(out1=out1, cta1=cta1, out2=out2, cta2=cta2, done=done, N1=N1, N2=N2)
            if layered:
                args["NL"] = NL
            kernel.launch(**args, **({"grid": grid} if grid else {}))
            torch.cuda.synchronize()
            what = f"{dispatch}{' layers' if layered else ''} N1={N1} N2={N2} NL={layers} grid={grid}"
            assert (done == 1).all(), what
            for layer in range(layers):
                for name, out, cta in (("first", out1, cta1), ("second", out2, cta2)):
                    o, c = (out[layer], cta[layer]) if layered else (out, cta)
                    check_counts(o.tolist(), c.tolist(), f"{what} layer {layer} call {name}")
    finally:
        kernel.unload()


@pytest.mark.gpu
def test_a_lone_counter_continues_along_its_grid_stride_walk(objects):
    import pipelink
    import torch
    kernel = pipelink.link([str(objects["run_count"])]).kernel()
    try:
        for N, grid in ((1, None), (5000, 7), (4096, None)):
            out = torch.full((N,), -7, dtype=torch.int32, device="cuda")
            cta = torch.full((N,), -7, dtype=torch.int32, device="cuda")
            kernel.launch(out=out, cta=cta, N=N, **({"grid": grid} if grid else {}))
            torch.cuda.synchronize()
            check_counts(out.tolist(), cta.tolist(), f"sequential N={N} grid={grid}")
    finally:
        kernel.unload()
