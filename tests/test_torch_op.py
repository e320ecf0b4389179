"""pipelink.runtime.torch without a GPU: the schema from the manifest, the registration through torch.library and
the checks of the fake implementation (dtype, device, contiguity, shapes), with a stand-in for torch
where torch is not installed (the GPU tests run the real one: tests/test_gpu_torch.py)."""
import importlib
import sys
import types

import pytest

from pipelink.runtime.launch import ArgumentError, Kernel

CHAIN = {"manifest": 2, "kernel": "tile_chain", "block": [128], "tiles": ["ceil_div(M, 32)"],
         "params": [{"name": "x", "dtype": "f32", "pointer": True, "const": True},
                    {"name": "h", "dtype": "f32", "pointer": True, "const": False},
                    {"name": "M", "dtype": "i32", "pointer": False, "const": False},
                    {"name": "N", "dtype": "i32", "pointer": False, "const": False},
                    {"name": "out", "dtype": "f32", "pointer": True, "const": False},
                    {"name": "alpha", "dtype": "f32", "pointer": False, "const": False},
                    {"name": "on", "dtype": "bool", "pointer": False, "const": False}]}


class FakeTensor:
    def __init__(self, shape, dtype="torch.float32", device="cuda:0", contiguous=True):
        self.shape, self.dtype, self._contiguous = tuple(shape), dtype, contiguous
        kind, _, index = device.partition(":")
        self.device = types.SimpleNamespace(type=kind, index=int(index) if index else None)

    def is_contiguous(self):
        return self._contiguous


@pytest.fixture
def pt(monkeypatch):
    """pipelink.runtime.torch over a stand-in torch that records what is registered."""
    registered = {}

    class Library:
        def __init__(self, ns, kind):
            self.ns = ns

        def define(self, schema):
            registered.setdefault("define", []).append(schema)

        def impl(self, name, fn, key):
            registered.setdefault("impl", []).append((name, key))

    stub = types.ModuleType("torch")
    stub.library = types.SimpleNamespace(Library=Library, register_fake=lambda name, fn, lib=None:
                                         registered.setdefault("fake", []).append(name))
    stub.Tensor = FakeTensor
    monkeypatch.setitem(sys.modules, "torch", stub)
    monkeypatch.delitem(sys.modules, "pipelink.runtime.torch", raising=False)
    module = importlib.import_module("pipelink.runtime.torch")
    module._LIBRARIES.clear()
    yield module, registered
    monkeypatch.delitem(sys.modules, "pipelink.runtime.torch", raising=False)


def test_schema_and_registration(pt):
    module, registered = pt
    op = module.register(Kernel(CHAIN), shapes={"out": ("M", "N")})
    assert registered["define"] == [
        "tile_chain(Tensor x, Tensor(a!) h, int M, int N, Tensor(b!) out, float alpha, bool on) -> ()"]
    assert registered["impl"] == [("tile_chain", "CUDA")] and registered["fake"] == ["pipelink::tile_chain"]
    assert op.name == "tile_chain" and op.namespace == "pipelink"


@pytest.mark.parametrize("change, words", [
    ({"x": FakeTensor((4, 8), dtype="torch.float64")}, "'x' must be a torch.float32 tensor"),
    ({"h": FakeTensor((4, 8), device="cpu")}, "'h' is on"),
    ({"h": FakeTensor((4, 8), device="cuda:1")}, "runs on cuda:0"),
    ({"x": FakeTensor((4, 8), contiguous=False)}, "not contiguous"),
    ({"out": FakeTensor((4, 7))}, r"'out' must have shape \[M=4, N=8\]; got \[4, 7\]"),
])
def test_the_fake_implementation_checks_what_the_manifest_and_the_shapes_say(pt, change, words):
    module, _ = pt
    op = module.register(Kernel(CHAIN), "chain_checked", shapes={"out": ("M", "N")})
    args = dict(x=FakeTensor((4, 8)), h=FakeTensor((4, 8)), M=4, N=8, out=FakeTensor((4, 8)), alpha=0.5, on=True)
    op.fake(*args.values())  # fine as given
    args.update(change)
    with pytest.raises(ArgumentError, match=words):
        op.fake(*args.values())


def test_shapes_must_name_tensor_parameters(pt):
    module, _ = pt
    with pytest.raises(ValueError, match="not tensor parameters"):
        module.register(Kernel(CHAIN), "bad", shapes={"M": ("4",)})


def test_without_torch_the_module_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "pipelink.runtime.torch", raising=False)
    with pytest.raises(ImportError, match="pipelink.runtime.torch needs PyTorch"):
        importlib.import_module("pipelink.runtime.torch")
    monkeypatch.delitem(sys.modules, "pipelink.runtime.torch", raising=False)
