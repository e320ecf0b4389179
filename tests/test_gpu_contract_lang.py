"""The contract language's new runtime capabilities on a GPU, each a small pipeline of real
components against a float64 reference (pipelink/harness/problems.py):

- tiled_softmax: a whole-row softmax (1-d grid of row blocks) after a loader and a store of 2-d tiles,
  which run in an inner loop of each row block; tile_store's port alignment is honoured (it traps if not);
- prefix_sum: a chain inside one component, task i waiting for task i - 1, both dispatches;
- halo_stencil: a 3-point stencil across CTAs, each segment waiting for its clamped halo;
- the launcher refusing a too-small or misaligned buffer before anything runs.
"""
import dataclasses
import os

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.passes import LinkOptions, link
from pipelink.runtime.launch import ArgumentError

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (1, 5), (31, 100), (32, 128), (33, 129), (257, 1000), (1000, 4099), (2048, 8192)]


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def linked(objects, name, dispatch=None):
    pipe = next(p for p in shipped_pipelines() if p.name == name)
    spec = load_pipeline(pipe.path, DiagnosticSink())
    if dispatch:
        spec = dataclasses.replace(spec, dispatch=dispatch)  # a PipelineSpec is frozen
    result = link([str(objects[n]) for n in pipe.components], LinkOptions(pipeline=spec))
    assert result.ok, [d.render() for d in result.diagnostics]
    return result.kernel()


@pytest.fixture(scope="module")
def kernels(shipped_objects):
    out = {"tiled_softmax": linked(shipped_objects, "tiled_softmax")}
    for name in ("prefix_sum", "halo_stencil"):
        for dispatch in ("static", "dynamic"):
            out[f"{name}/{dispatch}"] = linked(shipped_objects, name, dispatch)
    yield out
    for k in out.values():
        k.unload()


def judge(kernel, pipeline, M, N, grid=None):
    from pipelink.harness.problems import run_and_judge
    seed = fresh_seed()
    err, problem = run_and_judge(kernel, pipeline, M, N, seed, grid=grid)
    assert err <= problem.tolerance, f"{pipeline} M={M} N={N} grid={grid} seed={seed}: max error {err}"


@pytest.mark.parametrize("M,N", SHAPES, ids=str)
def test_row_softmax_after_2d_tiles(kernels, M, N):
    judge(kernels["tiled_softmax"], "tiled_softmax", M, N)


@pytest.mark.parametrize("grid", [1, 3, 1000])
def test_row_softmax_any_grid(kernels, grid):
    """One CTA walks every row block (and each row's tiles); a large grid leaves CTAs idle."""
    judge(kernels["tiled_softmax"], "tiled_softmax", 515, 2000, grid=grid)


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
@pytest.mark.parametrize("M,N", [(1, 1), (1, 1023), (1, 1025), (3, 5000), (64, 4096), (4096, 4096)], ids=str)
def test_prefix_sum_chain(kernels, dispatch, M, N):
    """Exact i32 sums over up to 16M values (16384 tasks, each waiting for the one before it)."""
    judge(kernels[f"prefix_sum/{dispatch}"], "prefix_sum", M, N)


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_prefix_sum_repeated_launches_and_small_grids(kernels, dispatch):
    """A chain needs no co-residency beyond what the dispatch asks: one CTA, a few, repeated launches."""
    for grid in (1, 2, 7, None):
        judge(kernels[f"prefix_sum/{dispatch}"], "prefix_sum", 100, 3000, grid=grid)


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
@pytest.mark.parametrize("M,N", [(1, 1), (1, 2), (1, 1024), (1, 1025), (7, 3000), (1000, 4099)], ids=str)
def test_clamped_halo_stencil(kernels, dispatch, M, N):
    judge(kernels[f"halo_stencil/{dispatch}"], "halo_stencil", M, N)


def test_buffers_too_small_or_misaligned_are_refused_before_the_launch(kernels):
    import torch
    from pipelink.harness.problems import prefix_sum_problem, softmax_problem
    p = softmax_problem(64, 300, fresh_seed())
    k = kernels["tiled_softmax"]
    short = torch.full((64 * 300 - 1,), float("nan"), device="cuda")
    with pytest.raises(ArgumentError, match="holds 19199 elements"):
        k.launch(**dict(p.args, y=short))
    shifted = torch.full((64 * 300 + 1,), float("nan"), device="cuda")[1:]  # contiguous, 4 bytes off
    with pytest.raises(ArgumentError, match="not 16-byte aligned"):
        k.launch(**dict(p.args, y=shifted))
    torch.cuda.synchronize()
    assert short.isnan().all() and shifted.isnan().all()  # nothing ran
    q = prefix_sum_problem(4, 1000, fresh_seed())
    with pytest.raises(ArgumentError, match="'carry'"):  # the workspace: ceil_div(4000, 1024) = 4 elements
        kernels["prefix_sum/dynamic"].launch(**dict(q.args, carry=torch.zeros(3, dtype=torch.int32, device="cuda")))
