"""Linked kernels as torch operators (pipelink.runtime.torch): a model calling two of them compiles with
torch.compile(fullgraph=True) and matches eager, also captured in CUDA graphs; wrong arguments are
clear errors raised before any driver call."""
import dataclasses
import math

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.passes import LinkOptions, link

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def linked_kernel(objects, name, dispatch=None):
    pipe = next(p for p in shipped_pipelines() if p.name == name)
    spec = load_pipeline(pipe.path, DiagnosticSink())
    if dispatch:
        spec = dataclasses.replace(spec, dispatch=dispatch)
    result = link([str(objects[n]) for n in pipe.components], LinkOptions(pipeline=spec))
    assert result.ok, [d.render() for d in result.diagnostics]
    return result.kernel()


@pytest.fixture(scope="module")
def ops(shipped_objects):
    import pipelink.runtime.torch as pt
    chain = linked_kernel(shipped_objects, "tile_chain", "static")
    splitk = linked_kernel(shipped_objects, "splitk_gemv", "dynamic")
    out = {
        "chain": pt.register(chain, "test_tile_chain", shapes={"x": ("M", "N"), "h": ("M", "N"), "out": ("M", "N")}),
        "splitk": pt.register(splitk, "test_splitk_gemv", shapes={"x": ("M", "K"), "w": ("K",),
                                                                  "partial": ("ceil_div(K, 1024)", "M"), "y": ("M",)}),
    }
    yield out
    chain.unload()
    splitk.unload()


class Model(torch.nn.Module):
    """tile_chain, a torch op, splitk_gemv, a torch op: y = (2 (a silu(x) + b x)) @ w + 1."""

    def forward(self, x, w):
        M, N = x.shape
        h, z = torch.empty_like(x), torch.empty_like(x)
        torch.ops.pipelink.test_tile_chain(x, h, M, N, z, 0.5, 1.5)
        z = z * 2.0
        partial = torch.empty((-(-N // 1024), M), dtype=x.dtype, device=x.device)
        y = torch.empty((M,), dtype=x.dtype, device=x.device)
        torch.ops.pipelink.test_splitk_gemv(z, w, partial, M, N, y)
        return y + 1.0


def reference(x, w):
    xd = x.double()
    return (2.0 * (0.5 * xd * torch.sigmoid(xd) + 1.5 * xd)) @ w.double() + 1.0


def inputs(M, N, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(M, N, generator=g).cuda(), torch.randn(N, generator=g).cuda())


def close(got, want, N):
    return float(((got.double() - want).abs() / (1.0 + want.abs())).max()) <= 1e-4 * math.sqrt(N)


def test_the_schema_comes_from_the_manifest(ops):
    from pipelink.runtime.torch import schema
    assert schema(ops["chain"].kernel, "k") == \
        "k(Tensor x, Tensor(a!) h, int M, int N, Tensor(b!) out, float alpha, float beta) -> ()"


def test_eager_op_matches_the_reference(ops):
    x, w = inputs(300, 2500, 1)
    assert close(Model()(x, w), reference(x, w), 2500)


def test_compiled_fullgraph_matches_eager(ops):
    torch._dynamo.reset()
    model = Model()
    compiled = torch.compile(model, fullgraph=True)
    for seed, (M, N) in enumerate([(300, 2500), (300, 2500), (64, 1024)]):
        x, w = inputs(M, N, seed)
        eager = model(x, w)
        got = compiled(x, w)
        torch.cuda.synchronize()
        assert torch.allclose(got, eager, rtol=1e-5, atol=1e-5), (M, N)
        assert close(got, reference(x, w), N)


def test_compiled_with_cuda_graphs_replays_correctly(ops):
    """mode='reduce-overhead': torch warms the model up, captures it in a CUDA graph and replays it."""
    torch._dynamo.reset()
    compiled = torch.compile(Model(), mode="reduce-overhead", fullgraph=True)
    x, w = inputs(256, 3000, 7)
    for i in range(50):
        x.copy_(inputs(256, 3000, 100 + i)[0])
        got = compiled(x, w).clone()
        torch.cuda.synchronize()
        assert close(got, reference(x, w), 3000), i


def test_ops_inside_torch_cuda_graph(ops):
    model = Model()
    x, w = inputs(200, 2048, 3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model(x, w)  # warm-up: prepares the launches and allocates the event workspace
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = model(x, w)
    for i in range(100):
        x.copy_(inputs(200, 2048, 50 + i)[0])
        graph.replay()
        torch.cuda.synchronize()
        assert close(y, reference(x, w), 2048), i


@pytest.mark.parametrize("case, words", [
    ("dtype", "must be a torch.float32 tensor"),
    ("shape", r"must have shape \[M=300, N=2500\]"),
    ("device", "is on cpu"),
    ("strided", "not contiguous"),
])
def test_wrong_arguments_fail_before_any_driver_call(ops, monkeypatch, case, words):
    import pipelink.runtime.driver
    x, w = inputs(300, 2500, 5)
    h, out = torch.empty_like(x), torch.empty_like(x)
    if case == "dtype":
        x = x.double()
    elif case == "shape":
        out = torch.empty(300, 2499, device="cuda")
    elif case == "device":
        h = h.cpu()
    else:
        x = torch.empty(2500, 300, device="cuda").t()
    monkeypatch.setattr(pipelink.runtime.driver, "driver", lambda: pytest.fail("the driver was called"))
    with pytest.raises(Exception, match=words):
        torch.ops.pipelink.test_tile_chain(x, h, 300, 2500, out, 0.5, 1.5)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=words):  # and while tracing, from the fake implementation
        torch.compile(lambda *a: torch.ops.pipelink.test_tile_chain(*a), fullgraph=True)(x, h, 300, 2500, out, 0.5, 1.5)
