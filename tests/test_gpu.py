"""The shipped pipelines, linked and run on a GPU against a float64 reference.

Fresh random inputs every run (the seed is in the failure message), outputs poisoned with NaN so
an unwritten element fails, shapes with ragged edges, several grid sizes, repeated launches.
"""
import dataclasses
import json
import os
from pathlib import Path

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.passes import LinkOptions, link

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parent.parent
SHAPES = [(1, 1), (31, 100), (32, 128), (33, 129), (257, 1000), (1000, 4099), (4096, 4096), (8192, 8192)]


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def link_pipeline(objects, name, dispatch=None, debug=False, specialize=None, **replace):
    pipe = next(p for p in shipped_pipelines() if p.name == name)
    spec = load_pipeline(pipe.path, DiagnosticSink())
    spec = dataclasses.replace(spec, dispatch=dispatch or spec.dispatch, debug_events=debug,
                               specialize=specialize if specialize is not None else spec.specialize)
    result = link([str(replace.get(n, objects[n])) for n in pipe.components], LinkOptions(pipeline=spec))
    assert result.ok, [d.render() for d in result.diagnostics]
    return result


@pytest.fixture(scope="module")
def kernels(shipped_objects):
    out = {pipe.name: link_pipeline(shipped_objects, pipe.name).kernel() for pipe in shipped_pipelines()}
    for name in ("splitk_gemv", "tile_chain", "moe_dispatch"):
        for dispatch in ("static", "dynamic"):
            out[f"{name}/{dispatch}"] = link_pipeline(shipped_objects, name, dispatch).kernel()
    yield out
    for k in out.values():
        k.unload()


def judge(kernel, pipeline, M, N, grid=None):
    from pipelink.harness.problems import run_and_judge
    seed = fresh_seed()
    err, problem = run_and_judge(kernel, pipeline, M, N, seed, grid=grid)
    assert err <= problem.tolerance, f"{pipeline} M={M} N={N} grid={grid} seed={seed}: max error {err}"


@pytest.mark.parametrize("pipeline", ["rowsum", "ring_gemv"])
@pytest.mark.parametrize("M,N", SHAPES, ids=lambda v: str(v))
def test_pipeline_against_reference(kernels, pipeline, M, N):
    judge(kernels[pipeline], pipeline, M, N)


@pytest.mark.parametrize("pipeline", ["rowsum", "ring_gemv"])
@pytest.mark.parametrize("grid", [1, 3, 7, 1000])
def test_any_grid_covers_every_tile(kernels, pipeline, grid):
    """One CTA walking every tile wraps the ring many times; a large grid leaves CTAs idle."""
    judge(kernels[pipeline], pipeline, 515, 2000, grid=grid)


def test_repeated_launches(kernels):
    for _ in range(5):
        judge(kernels["ring_gemv"], "ring_gemv", 300, 3000)
        judge(kernels["rowsum"], "rowsum", 300, 3000)


EVENT_SHAPES = [(1, 1), (37, 1000), (300, 4099), (2048, 8192), (8192, 2048)]


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
@pytest.mark.parametrize("pipeline", ["splitk_gemv", "tile_chain"])
def test_event_pipeline_many_shapes_one_cubin(kernels, pipeline, dispatch):
    """Every shape from the same linked kernel, no relink; launches in a row share the event
    tensors without any reset in the stream."""
    kernel = kernels[f"{pipeline}/{dispatch}"]
    for M, N in EVENT_SHAPES:
        judge(kernel, pipeline.split("/")[0], M, N)


@pytest.mark.parametrize("pipeline", ["splitk_gemv", "tile_chain"])
def test_static_and_dynamic_dispatch_agree_bit_for_bit(kernels, pipeline):
    import torch

    from pipelink.harness.problems import PROBLEMS
    seed = fresh_seed()
    outs = []
    for dispatch in ("static", "dynamic"):
        problem = PROBLEMS[pipeline](1000, 5000, seed)
        kernels[f"{pipeline}/{dispatch}"].launch(**problem.args)
        torch.cuda.synchronize()
        outs.append([problem.args[o].cpu() for o in problem.outputs])
    assert all(torch.equal(a, b) for a, b in zip(*outs)), f"seed {seed}"


@pytest.mark.parametrize("pipeline", ["splitk_gemv", "tile_chain"])
def test_event_launches_growing_and_shrinking(kernels, pipeline):
    """Each launch zeroes the counters the launch before it used, for the launch after it: a big
    launch after a small one, and a small after a big, must both find every counter at zero."""
    for M, N in [(2048, 8192), (37, 1000), (8192, 2048), (1, 1), (300, 4099), (8192, 2048), (2048, 8192)]:
        judge(kernels[f"{pipeline}/dynamic"], pipeline, M, N)
        judge(kernels[f"{pipeline}/static"], pipeline, N // 2 + 1, M // 2 + 1)


def test_repeated_event_launches_without_reset(kernels):
    for _ in range(20):
        judge(kernels["splitk_gemv/dynamic"], "splitk_gemv", 513, 3000)
        judge(kernels["tile_chain/static"], "tile_chain", 300, 700)


def test_debug_build_reports_a_wait_that_never_ends(shipped_objects, tmp_path):
    """A bug sampling at link time cannot see: the producer caps its K chunks at 4, the reducer
    expects all of them. Shapes up to 4 chunks link and run; K = 8192 (8 chunks) would hang."""

    from pipelink.cli import main
    from pipelink.harness.problems import PROBLEMS
    from pipelink.harness.shipped import REPO
    from pipelink.runtime.workspace import EventTimeout

    def variant(name, edit):
        raw = json.loads((REPO / "contracts" / f"{name}.json").read_text())
        edit(raw)
        (tmp_path / f"{name}.json").write_text(json.dumps(raw))
        obj = tmp_path / f"{name}.o"
        assert main(["build", str(REPO / "components" / name / f"{name}.cu"), "--contract",
                     str(tmp_path / f"{name}.json"), "-o", str(obj)]) == 0
        return obj

    partial = variant("splitk_partial", lambda c: c["geometry"]["tile_sequence"].update(
        grid=["ceil_div(M, ROWS)", "min(ceil_div(K, KCHUNK), 4)"]))
    reduce_ = variant("splitk_reduce", lambda c: c["events"]["waits"][0].update(count="ceil_div(K, KCHUNK)"))
    kernel = link_pipeline(shipped_objects, "splitk_gemv", "dynamic", debug=True, splitk_partial=partial,
                           splitk_reduce=reduce_).kernel()
    try:
        judge(kernel, "splitk_gemv", 100, 3000)             # 3 chunks: fine
        problem = PROBLEMS["splitk_gemv"](100, 8192, fresh_seed())
        with pytest.raises(EventTimeout) as info:
            kernel.launch(**problem.args)
        e = info.value
        assert (e.component, e.event, e.expected, e.observed) == ("splitk_reduce", "partials", 8, 4)
        assert "waited for event 'partials'" in str(e)
        judge(kernel, "splitk_gemv", 100, 3000)             # the context survived: it runs again
        with pytest.raises(EventTimeout):                   # and a second timeout is reported too
            kernel.launch(**problem.args)
        judge(kernel, "splitk_gemv", 100, 3000)
    finally:
        kernel.unload()


MOE_SHAPES = [(16, 64, 8, 2), (128, 512, 64, 8), (1024, 2048, 128, 8), (4096, 256, 16, 4)]


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_moe_dispatch_random_routing_one_cubin(kernels, dispatch):
    """Data-dependent events: which experts a token notifies, how many rows an expert waits for,
    and which rows it notifies back all come from the routing, fresh each run."""
    import torch

    from pipelink.harness.problems import max_error, moe_problem
    kernel = kernels[f"moe_dispatch/{dispatch}"]
    for T, H, E, TOPK in MOE_SHAPES:
        for skew in (0.0, 4.0):
            seed = fresh_seed()
            problem = moe_problem(T, H, seed, E=E, TOPK=TOPK, skew=skew)
            kernel.launch(**problem.args)
            torch.cuda.synchronize()
            err = max_error(problem)
            assert err <= problem.tolerance, f"T={T} H={H} E={E} TOPK={TOPK} skew={skew} seed={seed}: {err}"


def test_two_kernels_sharing_one_workspace(kernels):
    """Kernels that share event memory continue one launch sequence: alternating them stays correct."""
    static, dynamic = kernels["splitk_gemv/static"], kernels["splitk_gemv/dynamic"]
    dynamic.share_workspace(static)
    for _ in range(5):
        judge(static, "splitk_gemv", 700, 5000)
        judge(dynamic, "splitk_gemv", 700, 5000)


@pytest.mark.parametrize("pipeline", ["rowsum", "ring_gemv"])
def test_a_link_specialized_for_one_shape_computes_that_shape(shipped_objects, pipeline):
    """`specialize` bakes M into the body (the glue's constant under the parameter's name); the launch passes the
    same M, and the result is the unspecialized kernel's."""
    M, N = 257, 1000
    kernel = link_pipeline(shipped_objects, pipeline, specialize={"M": M}).kernel()
    try:
        judge(kernel, pipeline, M, N)
    finally:
        kernel.unload()


def test_a_clustered_kernel_runs_in_whole_clusters(shipped_objects, tmp_path):
    """A contract's cluster reaches the kernel (__cluster_dims__), the manifest and the launcher's grid: whole
    clusters that fit at once; a grid of part clusters is refused before the driver sees it. The tiles are walked
    in whole clusters too: tile_load declares a cluster of 2, so its grid (and block_rowsum's, the same sequence)
    is padded to an even count of tile rows, and the padded rows are past the data (tile_load fills them with
    zeros, block_rowsum stores no row past M); over the unpadded grid the link is refused (PL202)."""
    import pipelink
    from pipelink.runtime.launch import ArgumentError

    def built(name, tag, edit):
        raw = json.loads((REPO / "contracts" / f"{name}.json").read_text())
        edit(raw)
        return pipelink.build(REPO / "components" / name / f"{name}.cu", json.dumps(raw).encode(),
                              tmp_path / f"{name}_{tag}.o")

    def pad(raw):
        raw["geometry"]["tile_sequence"]["grid"][0] = "ceil_div(ceil_div(M, TILE_M), 2) * 2"

    def cluster(raw):
        raw["cluster"] = {"dims": [2]}

    unpadded = built("tile_load", "unpadded", cluster)
    refused = link([str(unpadded), str(shipped_objects["tile_transform"]), str(shipped_objects["block_rowsum"])],
                   LinkOptions(pipeline=load_pipeline(REPO / "pipelines" / "rowsum.json", DiagnosticSink())))
    assert not refused.ok and [d.code for d in refused.diagnostics if d.severity == "error"] == ["PL202"]
    obj = built("tile_load", "padded", lambda raw: (cluster(raw), pad(raw)))
    kernel = link_pipeline(shipped_objects, "rowsum", tile_load=obj,
                           block_rowsum=built("block_rowsum", "padded", pad)).kernel()
    try:
        assert kernel.manifest.cluster == (2, 1, 1) and kernel.max_active_clusters() >= 1
        assert kernel.manifest.cluster_tiles == {"tile_load": "(ceil_div(ceil_div(M, 32), 2) * 2) * (ceil_div(N, 128))"}
        assert kernel.resident_blocks() % 2 == 0 and kernel.grid_for(M=1, N=1) == 2
        for M, N in ((1, 1), (33, 129), (1000, 4099)):  # one tile of data: a cluster, its second tile past M
            judge(kernel, "rowsum", M, N)
        judge(kernel, "rowsum", 515, 2000, grid=6)
        with pytest.raises(ArgumentError, match="clusters of 2"):
            judge(kernel, "rowsum", 515, 2000, grid=7)
    finally:
        kernel.unload()


# Run in a process of its own, so that a kernel that hangs ends with the process (the timeout below) instead of
# the test session: launch each kernel over odd data tile counts and several grids, and print what it stored.
CLUSTER_SWAP_RUN = r"""
import json, sys
import torch
import pipelink
out = {"sequential": [], "persistent": []}
k = pipelink.load(sys.argv[1])
for T in (1, 3, 5, 7, 33, 1001, 4099):
    for grid in (None, 2, 6):
        o = torch.full((T,), -1, dtype=torch.int32, device="cuda")
        k.launch(out=o, T=T, grid=grid)
        torch.cuda.synchronize()
        out["sequential"].append([T, grid, o.cpu().tolist()])
k.unload()
k = pipelink.load(sys.argv[2])
for U, T in ((3, 5), (1, 1), (5, 9), (7, 33), (2, 1001)):
    for grid in (None, 4, 6):
        o = torch.full((T,), -1, dtype=torch.int32, device="cuda")
        marks = torch.zeros((U,), dtype=torch.int32, device="cuda")
        k.launch(out=o, T=T, marks=marks, U=U, grid=grid)
        torch.cuda.synchronize()
        out["persistent"].append([U, T, grid, o.cpu().tolist(), marks.cpu().tolist()])
k.unload()
print(json.dumps(out))
"""


def test_a_component_that_syncs_its_cluster_every_tile_finishes(tmp_path):
    """cluster_swap meets its cluster's other CTA at every tile (barrier.cluster, then a hand-over through
    distributed shared memory that each CTA waits for). Over odd data tile counts its grid is padded to whole
    clusters, so both CTAs of every cluster walk the same tiles, t and t ^ 1 (a CTA's tiles are those whose index
    modulo 2 is its rank): each stores its peer's task. In a sequential kernel, and in a persistent one after a
    call of another component with an odd task count, dealt on (deal: continue) to a whole cluster. Walked as
    before (the cluster's CTAs apart), a CTA waits forever for a peer that has left or runs another call: the
    launches run in a process of their own with a timeout."""
    import subprocess
    import sys

    import pipelink

    def built(name, src, contract):
        (tmp_path / f"{name}.cu").write_text(src)
        return pipelink.build(tmp_path / f"{name}.cu", json.dumps(contract).encode(), tmp_path / f"{name}.o")

    from test_clusters import CLUSTER_SWAP, CLUSTER_SWAP_SRC, TICK, TICK_SRC
    swap, tick = built("cluster_swap", CLUSTER_SWAP_SRC, CLUSTER_SWAP), built("tick", TICK_SRC, TICK)
    sequential = pipelink.link([swap], pipeline={"pipeline": 1, "name": "swap_seq"})
    assert sequential.ok, [d.render() for d in sequential.diagnostics]
    persistent = pipelink.link([tick, swap], pipeline={
        "pipeline": 1, "name": "swap_calls", "deal": "continue", "dispatch": "static",
        "calls": [{"name": "tick"}, {"name": "swap", "component": "cluster_swap"}]})
    assert persistent.ok, [d.render() for d in persistent.diagnostics]
    assert "/ 2u * 2u) % gridDim.x;" in persistent.glue  # the deal moves on in whole clusters
    dirs = [sequential.save(tmp_path / "seq").parent, persistent.save(tmp_path / "calls").parent]
    (tmp_path / "run.py").write_text(CLUSTER_SWAP_RUN)
    try:
        proc = subprocess.run([sys.executable, str(tmp_path / "run.py"), *map(str, dirs)], capture_output=True,
                              text=True, timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    except subprocess.TimeoutExpired:
        pytest.fail("a kernel whose component syncs its cluster at every tile did not finish in 300 s: the CTAs of "
                    "a cluster walked their tiles out of step")
    assert proc.returncode == 0, proc.stderr[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    for T, grid, stored in seen["sequential"]:
        assert stored == [t ^ 1 for t in range(T)], (T, grid, stored[:16])
    for U, T, grid, stored, marks in seen["persistent"]:
        assert stored == [t ^ 1 for t in range(T)] and marks == [1] * U, (U, T, grid, stored[:16], marks)
