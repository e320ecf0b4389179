"""Programmatic dependent launch on a GPU: a kernel linked with `dependent_launch` starts while the one
before it in the stream finishes, and waits for it before reading anything. Two launches of a
persistent kernel, the second reading what the first wrote, eagerly and inside a CUDA graph, against
float64; fresh random inputs, outputs poisoned first."""
import dataclasses
import math
import os

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker import LinkOptions, link

pytestmark = pytest.mark.gpu


def silu(x):
    return x / (1.0 + (-x).exp())


@pytest.fixture(scope="module", params=["static", "dynamic"])
def kernel(request, shipped_objects):
    pipe = next(p for p in shipped_pipelines() if p.name == "tile_chain")
    spec = dataclasses.replace(load_pipeline(pipe.path, DiagnosticSink()), dispatch=request.param,
                               dependent_launch=True)
    result = link([str(shipped_objects[n]) for n in pipe.components], LinkOptions(pipeline=spec, cache=False))
    assert result.ok, [d.render() for d in result.diagnostics]
    assert result.manifest.dependent_launch and "griddepcontrol.wait" in result.glue
    k = result.kernel()
    yield k
    k.unload()


def test_a_dependent_launch_reads_what_the_launch_before_it_wrote(kernel):
    torch = pytest.importorskip("torch")
    seed = int.from_bytes(os.urandom(4), "little")
    g = torch.Generator(device="cpu").manual_seed(seed)
    M, N = 300, 1000
    alpha, beta = 0.75, -0.5
    x = torch.randn(M, N, generator=g).cuda()
    h1, h2 = (torch.full((M, N), math.nan, device="cuda") for _ in range(2))
    y1, y2 = (torch.full((M, N), math.nan, device="cuda") for _ in range(2))
    first = kernel.prepare(x=x, h=h1, out=y1, M=M, N=N, alpha=alpha, beta=beta)
    second = kernel.prepare(x=y1, h=h2, out=y2, M=M, N=N, alpha=alpha, beta=beta)
    x64 = x.double()
    once = alpha * silu(x64) + beta * x64
    want = alpha * silu(once) + beta * once
    stream = torch.cuda.current_stream()
    for _ in range(20):  # the second often starts before the first ends: it must still see all of y1
        y1.fill_(math.nan), y2.fill_(math.nan)
        first.launch(stream)
        second.launch(stream)
        torch.cuda.synchronize()
        err = float(((y2.double() - want).abs() / (1.0 + want.abs())).max())
        assert err <= 1e-5, f"seed {seed}: max error {err}"
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        first.launch(side), second.launch(side)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        s = torch.cuda.current_stream()
        first.launch(s)
        second.launch(s)
    for _ in range(50):
        y1.fill_(math.nan), y2.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        err = float(((y2.double() - want).abs() / (1.0 + want.abs())).max())
        assert err <= 1e-5, f"seed {seed} (graph): max error {err}"
