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
    clusters that fit at once; a grid of part clusters is refused before the driver sees it."""
    import pipelink
    from pipelink.runtime.launch import ArgumentError
    raw = json.loads((REPO / "contracts" / "tile_load.json").read_text())
    raw["cluster"] = {"dims": [2]}
    obj = pipelink.build(REPO / "components" / "tile_load" / "tile_load.cu", json.dumps(raw).encode(),
                         tmp_path / "tile_load.o")
    kernel = link_pipeline(shipped_objects, "rowsum", tile_load=obj).kernel()
    try:
        assert kernel.manifest.cluster == (2, 1, 1) and kernel.max_active_clusters() >= 1
        assert kernel.resident_blocks() % 2 == 0 and kernel.grid_for(M=1, N=1) == 2
        for M, N in ((1, 1), (33, 129), (1000, 4099)):  # one tile: one cluster, a CTA of it finds none
            judge(kernel, "rowsum", M, N)
        judge(kernel, "rowsum", 515, 2000, grid=6)
        with pytest.raises(ArgumentError, match="clusters of 2"):
            judge(kernel, "rowsum", 515, 2000, grid=7)
    finally:
        kernel.unload()
