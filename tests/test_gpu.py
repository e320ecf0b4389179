"""The shipped pipelines, linked and run on a GPU against a float64 reference.

Fresh random inputs every run (the seed is in the failure message), outputs poisoned with NaN so
an unwritten element fails, shapes with ragged edges, several grid sizes, repeated launches.
"""
import os

import pytest

from pipelink.linker import LinkOptions, link
from pipelink.pipeline import load_pipeline
from pipelink.diagnostics import DiagnosticSink
from pipelink.shipped import shipped_pipelines

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (31, 100), (32, 128), (33, 129), (257, 1000), (1000, 4099), (4096, 4096), (8192, 8192)]


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.fixture(scope="module")
def kernels(shipped_objects):
    out = {}
    for pipe in shipped_pipelines():
        sink = DiagnosticSink()
        spec = load_pipeline(pipe.path, sink)
        result = link([str(shipped_objects[n]) for n in pipe.components], LinkOptions(pipeline=spec))
        assert result.ok, [d.render() for d in result.diagnostics]
        out[pipe.name] = result.kernel()
    yield out
    for k in out.values():
        k.unload()


def judge(kernel, pipeline, M, N, grid=None):
    from pipelink.problems import run_and_judge
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
