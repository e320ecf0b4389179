"""Persistent kernels inside CUDA graphs: a launch captured once replays correctly 1000 times in a row,
with the inputs (and the routing read from the device) changing between replays; several kernels and
torch ops in one graph; captured replays and eager launches of the same kernel in turn.

A persistent kernel keeps its place in its event workspace on the device (docs/architecture.md, event
tensors), so the captured arguments never go stale and no host work runs per replay.
"""
import dataclasses
import math
import os
from pathlib import Path

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.passes import LinkOptions, link

pytestmark = pytest.mark.gpu

REPLAYS = 1000
PERSISTENT = ["splitk_gemv", "tile_chain", "moe_dispatch"]
SHAPES = {"splitk_gemv": (300, 4099), "tile_chain": (300, 1000), "moe_dispatch": (200, 256)}


def linked_kernel(objects, name, dispatch):
    pipe = next(p for p in shipped_pipelines() if p.name == name)
    spec = dataclasses.replace(load_pipeline(pipe.path, DiagnosticSink()), dispatch=dispatch)
    result = link([str(objects[n]) for n in pipe.components], LinkOptions(pipeline=spec))
    assert result.ok, [d.render() for d in result.diagnostics]
    return result.kernel()


@pytest.fixture(scope="module")
def kernels(shipped_objects):
    out = {(name, d): linked_kernel(shipped_objects, name, d) for name in PERSISTENT for d in ("static", "dynamic")}
    yield out
    for k in out.values():
        k.unload()


class Rotation:
    """A few problems of one shape (fresh seeds: other inputs, other routing); `load(i)` copies problem i's
    inputs into the arrays the captured launch reads and poisons its outputs, `error(i)` judges them."""

    def __init__(self, pipeline: str, count: int = 4):
        from pipelink.harness.problems import PROBLEMS
        M, N = SHAPES[pipeline]
        seed = int.from_bytes(os.urandom(4), "little")
        self.seed = seed
        problems = [PROBLEMS[pipeline](M, N, seed + i) for i in range(count)]

        def scalars(p):
            return {k: v for k, v in p.args.items() if not hasattr(v, "copy_")}
        # A captured launch keeps its scalar arguments: rotate through the problems that share problem 0's
        # (all of them where only data differs; tile_chain draws its alpha and beta per seed).
        self.problems = [p for p in problems if scalars(p) == scalars(problems[0])]
        # The arrays the launch is prepared (and captured) with: copies, so loading a problem never
        # overwrites the problems' own inputs.
        self.args = {k: (v.clone() if hasattr(v, "clone") else v) for k, v in problems[0].args.items()}
        import torch
        self.expected = [{k: v.to("cuda") for k, v in p.expected.items()} for p in self.problems]
        self.torch = torch

    def load(self, i: int) -> None:
        p = self.problems[i % len(self.problems)]
        for name, value in p.args.items():
            if hasattr(value, "copy_") and name not in p.outputs:
                self.args[name].copy_(value)
        for name in p.outputs:
            self.args[name].fill_(float("nan"))

    def error(self, i: int) -> float:
        """Largest relative error of the outputs against problem i's reference (NaN: unwritten, infinite)."""
        worst = 0.0
        for name, want in self.expected[i % len(self.problems)].items():
            got = self.args[name].double()
            if bool(got.isnan().any()):
                return math.inf
            worst = max(worst, float(((got - want).abs() / (1.0 + want.abs())).max()) if want.numel() else 0.0)
        return worst

    @property
    def tolerance(self) -> float:
        return self.problems[0].tolerance


def check_replays(rot: Rotation, replay, replays: int = REPLAYS, what: str = "", first: int = 0) -> None:
    torch = rot.torch
    for i in range(first, first + replays):
        rot.load(i)
        replay()
        torch.cuda.synchronize()
        err = rot.error(i)
        assert err <= rot.tolerance, f"{what} replay {i} (seed {rot.seed}): max error {err}"


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
@pytest.mark.parametrize("pipeline", PERSISTENT)
def test_torch_graph_capture_replays_1000_times(kernels, pipeline, dispatch):
    import torch
    kernel = kernels[(pipeline, dispatch)]
    rot = Rotation(pipeline)
    step = kernel.prepare(**rot.args)  # allocates the workspace: before the capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on the capture's stream, as torch asks
        rot.load(0)
        step.launch(side)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert rot.error(0) <= rot.tolerance
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.launch(torch.cuda.current_stream())
    check_replays(rot, graph.replay, what=f"{pipeline}/{dispatch}")


@pytest.mark.parametrize("pipeline", PERSISTENT)
def test_raw_stream_capture_replays_1000_times(kernels, pipeline):
    """cuStreamBeginCapture on a stream of one's own, cuGraphLaunch: no torch in the capture."""
    from cuda.bindings import driver as drv

    def ok(out):
        err, *rest = out if isinstance(out, tuple) else (out,)
        assert err == drv.CUresult.CUDA_SUCCESS, err
        return rest[0] if len(rest) == 1 else rest

    kernel = kernels[(pipeline, "dynamic")]
    rot = Rotation(pipeline)
    step = kernel.prepare(**rot.args)
    stream = ok(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
    try:
        rot.load(0)
        rot.torch.cuda.synchronize()
        step.launch(int(stream))
        ok(drv.cuStreamSynchronize(stream))
        assert rot.error(0) <= rot.tolerance
        ok(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
        step.launch(int(stream))
        graph = ok(drv.cuStreamEndCapture(stream))
        exe = ok(drv.cuGraphInstantiate(graph, 0))

        def replay():
            rot.torch.cuda.synchronize()  # the inputs were written on torch's stream
            ok(drv.cuGraphLaunch(exe, stream))
            ok(drv.cuStreamSynchronize(stream))
        check_replays(rot, replay, what=f"raw {pipeline}")
        ok(drv.cuGraphExecDestroy(exe))
        ok(drv.cuGraphDestroy(graph))
    finally:
        ok(drv.cuStreamDestroy(stream))


def test_two_kernels_and_torch_ops_in_one_graph(kernels):
    """splitk_gemv (dynamic dispatch) feeds a torch op, tile_chain (static) runs beside it: one graph."""
    import torch
    a, b = Rotation("splitk_gemv"), Rotation("tile_chain")
    step_a = kernels[("splitk_gemv", "dynamic")].prepare(**a.args)
    step_b = kernels[("tile_chain", "static")].prepare(**b.args)
    y = a.args["y"]
    doubled = torch.empty_like(y)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        a.load(0), b.load(0)
        step_a.launch(side), step_b.launch(side)
        torch.mul(y, 2.0, out=doubled)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        s = torch.cuda.current_stream()
        step_a.launch(s)
        torch.mul(y, 2.0, out=doubled)
        step_b.launch(s)
        torch.mul(doubled, 0.5, out=doubled)  # back to y: a torch op after a pipelink kernel and before one
    for i in range(REPLAYS):
        a.load(i), b.load(i)
        graph.replay()
        torch.cuda.synchronize()
        assert a.error(i) <= a.tolerance and b.error(i) <= b.tolerance, f"replay {i} (seeds {a.seed}, {b.seed})"
        assert torch.equal(doubled, y), f"replay {i}"


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_replays_and_eager_launches_take_turns(kernels, dispatch):
    """Captured replays and eager launches of one kernel share its workspace: in any order, every launch
    finds its counters at zero (no reset between them)."""
    import torch
    kernel = kernels[("tile_chain", dispatch)]
    rot = Rotation("tile_chain")
    step = kernel.prepare(**rot.args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        rot.load(0)
        step.launch(side)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.launch(torch.cuda.current_stream())
    stream = torch.cuda.current_stream()
    from pipelink.harness.problems import PROBLEMS, max_error
    for i in range(200):
        check_replays(rot, graph.replay if i % 3 else (lambda: step.launch(stream)), replays=1,
                      what=f"turn {i}", first=i)
        if i % 7 == 0:  # and an eager launch of another shape, through the same workspace
            other = PROBLEMS["tile_chain"](37, 129, rot.seed + 100 + i)
            kernel.launch(**other.args, stream=stream)
            torch.cuda.synchronize()
            assert max_error(other) <= other.tolerance, f"eager launch after turn {i} (seed {rot.seed})"


# --- the MoE case study: routing computed on the device, different every replay -------------------------

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "moe_four_owners"


@pytest.fixture(scope="module")
def moe_kernel(tmp_path_factory):
    from casestudy import case_module
    builds = case_module(CASE, "builds")
    base = builds.build_all(tmp_path_factory.mktemp("moe"))
    result = builds.link_pipelink(base.pipelink_objects)
    assert result.ok, [d.render() for d in result.diagnostics]
    kernel = result.kernel()
    yield kernel
    kernel.unload()


@pytest.mark.parametrize("shape,T", [("small", 16), ("small", 300), ("qwen3-30b-a3b", 64)])
def test_moe_case_study_replays_1000_times(moe_kernel, shape, T):
    moe_replays(moe_kernel, shape, T)


def moe_replays(kernel, shape: str, T: int, replays: int = REPLAYS) -> None:
    """The case study's kernel captured once; each replay routes other tokens (the router runs on the
    device), every 50th replay judged against the torch reference with every buffer poisoned."""
    import torch
    from casestudy import case_module
    layer = case_module(CASE, "layer")
    s = layer.SHAPES[shape]
    geometry = kernel.manifest.geometry
    seed = int.from_bytes(os.urandom(2), "little")
    weights = layer.make_weights(s, seed)
    tokens = [layer.make_tokens(s, T, seed + 1 + i) for i in range(4)]  # other tokens: other routing
    x = tokens[0].clone()
    buffers = layer.poisoned_buffers(layer.Layout(s, T, geometry))
    step = kernel.prepare(**layer.kernel_args(s, T, x, weights, buffers))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step.launch(side)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert layer.judge(s, x, weights, buffers).ok
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.launch(torch.cuda.current_stream())
    for i in range(replays):
        x.copy_(tokens[i % len(tokens)])
        judged = i % 50 == 0 or i == replays - 1
        if judged:  # every buffer poisoned: what the replay does not write shows
            for name, poisoned in layer.poisoned_buffers(layer.Layout(s, T, geometry)).items():
                buffers[name].copy_(poisoned)
        graph.replay()
        if judged:
            torch.cuda.synchronize()
            v = layer.judge(s, x, weights, buffers)
            assert v.ok, (shape, T, i, seed, v)
    torch.cuda.synchronize()
